"""a3c_graph: A3C on TensorFlow's graph/session API over a real ps/worker cluster."""

from setuptools import find_packages, setup

setup(
    name="a3c_graph",
    version="0.1.0",
    description="Asynchronous Advantage Actor-Critic on tf.compat.v1 graphs, distributed over "
                "tf.train.Server ps/worker clusters",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["a3c_graph", "a3c_graph.*", "benchmarks", "benchmarks.*"]),
    install_requires=[
        "tensorflow==2.21.0",
        "numpy==2.4.6",
        "gymnasium==1.4.0",
        "portpicker==1.6.0",   # free ports for local clusters, without races of our own
        "psutil==7.2.2",       # process trees: stop every task we started, and only those
        "tensorboard==2.21.0",  # the training curves; TF 2.21 no longer installs it
    ],
    extras_require={
        # ale-py ships the ROMs; opencv: AtariPreprocessing's resize; moviepy: RecordVideo
        # (evaluate --record); pygame-ce: CartPole's rgb_array rendering for --record.
        "atari": ["ale-py==0.12.1", "opencv-python-headless==5.0.0.93", "moviepy==2.2.1",
                  "pygame-ce==2.5.8"],
        # rliable: the Atari table's aggregates as Agarwal et al. 2021 report them (IQM,
        # stratified bootstrap intervals, performance profiles); scipy: a run's bootstrap
        # interval (scipy.stats.bootstrap); pandas below 3, which rliable's bootstrap
        # (arch 7.2) fails to import with.
        "bench": ["ray==2.60.0", "matplotlib==3.11.2", "rliable==1.2.0", "scipy==1.17.1",
                  "pandas==2.3.3"],
        # MuJoCo's physics for Gymnasium's HalfCheetah-v5, Hopper-v5, Walker2d-v5.
        "mujoco": ["mujoco==3.3.7"],
        # pyyaml: tests/unit/launcher/test_kubernetes.py reads deploy/kubernetes/tfjob.yaml.
        # pytest-random-order: the suite runs in a random order (pyproject.toml's addopts).
        # import-linter: `make lint` fails on an import against the layers (pyproject.toml).
        # pytest-xdist: `make test` runs the suite's files on two processes (Makefile).
        "dev": ["pytest==9.2.0", "pytest-timeout==2.4.0", "pytest-random-order==1.2.0",
                "pytest-xdist==3.8.0", "ruff==0.17.6", "matplotlib==3.11.2", "pyyaml==6.0.3",
                "import-linter==2.16"],
    },
    entry_points={
        "console_scripts": [
            "a3c-worker=a3c_graph.worker:main",
            "a3c-launch=a3c_graph.launch:main",
            "a3c-evaluate=a3c_graph.evaluate:main",
        ],
    },
)
