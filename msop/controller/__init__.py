"""msop.controller."""
