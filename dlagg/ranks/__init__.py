"""The job's ranks reduced: each rank read and reduced on a local process pool or a Dask cluster and the ranks
combined (reduce.py), the pool whose processes fork from a fork server that has imported dlagg (pool.py), and
the settings those processes and a Dask worker started for dlagg run with (tuning.py). Importing the package
imports none of them: ``python -m dlagg`` imports the pool before anything else."""
