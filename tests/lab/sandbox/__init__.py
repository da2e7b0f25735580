"""Tests of the lab's sandbox (:mod:`normlab.lab.sandbox`), mirroring its package."""
