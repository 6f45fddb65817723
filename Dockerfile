# One task of an a3c_graph cluster per container: `python -m a3c_graph.worker ...`.
#
#   docker build -t a3c-graph:0.1.0 .
#
# deploy/kubernetes/tfjob.yaml runs this image as the ps and workers of a Kubeflow TFJob.
# A task started by hand on the host network needs --allow-remote (docs/security.md).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# setup.py pins every dependency (tensorflow==2.21.0, gymnasium, ...); README.md is its long
# description. Only what the package needs goes into the image: no tests, benchmarks or runs.
WORKDIR /src
COPY setup.py README.md ./
COPY a3c_graph ./a3c_graph
RUN pip install . && rm -rf /src

# The tasks write only to --logdir: no root needed. A numeric user, so that Kubernetes'
# runAsNonRoot can check it.
RUN useradd --uid 1000 --create-home a3c
USER 1000
WORKDIR /home/a3c

CMD ["python", "-m", "a3c_graph.worker", "--help"]
