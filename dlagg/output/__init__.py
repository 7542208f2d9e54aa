"""The run's output: the staging folder every file is written into and moved into place from together
(staging.py), and the writer tasks that fill it while the next reports are built (writes.py)."""
