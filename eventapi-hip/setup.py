"""The C extension of eventapi-hip: its hot driver calls, in src/eventapi_hip/_native.c.

Everything else is in pyproject.toml; docs/native.md says why C. One build against CPython's
stable ABI (3.11) serves every supported interpreter (an abi3 wheel), and it needs a C compiler
and nothing else: the few driver prototypes it uses are declared in the source.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "eventapi_hip._native",
            sources=["src/eventapi_hip/_native.c"],
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            extra_compile_args=["-std=c11"],
            libraries=["m"],
            py_limited_api=True,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
