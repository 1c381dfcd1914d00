"""Running the worker: the embedded local model's server and returning free memory."""
