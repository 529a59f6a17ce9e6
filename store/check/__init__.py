"""Everything ``escrow verify`` checks: the hash chains (``verify``), the
blobs, the token ids, the stored totals, the cells' types, and verify's
plain-text lines."""
