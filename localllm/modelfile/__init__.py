"""Modelfiles: parse and serialize them (``parser``, ``serialize``), and build models from
them (``create``: the daemon side of ``/api/create``; ``upload``: the CLI side).
"""
