"""The store's schema: every table model (``tables``), the numbered
migrations (``migrations``), the version this Escrow writes (``version``)
and docs/SCHEMA.md's generated tables section (``doc``)."""
