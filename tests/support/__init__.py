"""What tests share: object builders (``builders``), fakes of the reconciler's seams
(``fakes``) and a fake clock (``clocks``). Test modules import from here, never from one
another or from a conftest."""
