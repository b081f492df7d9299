"""msop.informers."""
