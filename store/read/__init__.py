"""Everything that reads a store: the Store's queries (``reader``), run
liveness, the viewer's paginated reads, the light runs listing, the derived
totals read back, and the SQL behind reports and exports (``reports``)."""
