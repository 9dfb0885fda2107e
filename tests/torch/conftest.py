"""Fixtures of the PyTorch layer's tests."""

import pytest


@pytest.fixture
def built_kernel():
    """The fused CPU kernel's op, built on first use (a first build is a C++ compile, so never at
    collection); the test is skipped where it cannot be built."""
    from attnscale.torch.ext import load_kernel

    op = load_kernel()
    if op is None:
        pytest.skip("the kernel library is not built here")
    return op
