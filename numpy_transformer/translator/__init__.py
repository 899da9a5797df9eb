"""The translation toolkit built around the model: corpora and tokenisers, the run's configuration,
the Trainer and its run directory, data parallelism over threads and MPI ranks, checkpoints,
evaluation, decoding, pretrained import, plots and the ``numpy-transformer`` command line.

The toolkit imports the model (:mod:`numpy_transformer`); the model never imports the toolkit.
"""
