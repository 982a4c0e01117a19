"""Model-management use cases: ``details`` (a leaf), ``service`` (list, show, copy,
delete, pull), ``remote`` (the fit check and the dry run), ``search``, ``ollama``
(its registry and its store)."""
