"""Tests of the lessons (:mod:`normlab.lab.lessons`): one module per lesson's exercises, mirroring
its folder, and the lessons' registry."""
