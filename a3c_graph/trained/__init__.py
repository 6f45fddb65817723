"""A trained agent without a cluster: its checkpoint's policy played (evaluation, playing),
a MuJoCo episode's video recorded apart from TensorFlow (recording), the policy exported as
a SavedModel (exporting)."""
