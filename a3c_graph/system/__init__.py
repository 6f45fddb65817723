"""What the machine and its processes are, below everything that starts tasks: the
environment a TF process needs before its import (process_env), the devices a task sees
(devices), process trees stopped by pid (processes) and the loopback-only network namespace
that keeps the unauthenticated TF servers private (netns). Nothing here knows A3C."""
