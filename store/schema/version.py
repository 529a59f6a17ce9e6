"""The schema version this Escrow writes, apart from the migrations that
reach it, so that a light reader (``store.read.run_list``) can check a store's
version without importing SQLAlchemy. ``store.schema.migrations`` refuses to load
when its last migration is not this version."""

LATEST = 14
