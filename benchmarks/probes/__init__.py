"""Small experiments that answer one question about TensorFlow each."""
