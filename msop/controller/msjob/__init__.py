"""msop.controller.msjob."""
