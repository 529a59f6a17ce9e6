"""``escrow view``: a read-only web viewer of the trajectory store, served
on loopback (app.py) or written as a static bundle (export.py)."""
