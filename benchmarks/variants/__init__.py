"""The TF2 ways of running the same A3C: eager TF2 over multiprocessing and over Ray."""
