"""InfraRSI: makes PyTorch training jobs measurably faster without changing what they compute."""

__version__ = "0.1.0"
