"""Packs the built kiln (build/kiln, build/libkilnrt.so, build/libkilnptx.so of the source tree
above this folder) into the wheel as kiln/_native/{bin,lib}, where the package finds them
without environment variables. Build kiln first (./configure && ninja)."""
import os
import re
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "build")
NATIVE = {"bin": ["kiln"], "lib": ["libkilnrt.so", "libkilnptx.so"]}
OPTIONAL = {"libkilnptx.so"}  # absent when configured with --ptx-compiler=none


class BuildWithNative(build_py):
    def run(self):
        super().run()
        for sub, names in NATIVE.items():
            dest = os.path.join(self.build_lib, "kiln", "_native", sub)
            os.makedirs(dest, exist_ok=True)
            for name in names:
                src = os.path.join(ROOT, name)
                if not os.path.exists(src):
                    if name in OPTIONAL:
                        continue
                    raise SystemExit("kiln: %s is not built; run ./configure && ninja in the repository first"
                                     % os.path.normpath(src))
                shutil.copy2(src, os.path.join(dest, name))


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: it carries x86-64 Linux binaries


def version():
    """runtime/kiln.h's KILN_VERSION_MAJOR.MINOR.PATCH, kiln's one version."""
    with open(os.path.join(HERE, "..", "runtime", "kiln.h")) as f:
        parts = dict(re.findall(r"#define KILN_VERSION_(MAJOR|MINOR|PATCH) (\d+)", f.read()))
    return "%s.%s.%s" % (parts["MAJOR"], parts["MINOR"], parts["PATCH"])


setup(version=version(), cmdclass={"build_py": BuildWithNative}, distclass=NativeDistribution)
