"""The data path: sources -> vocabulary -> objectives -> seqio tasks -> batches."""
