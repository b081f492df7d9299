"""msop.api."""
