"""rooflens inside TensorBoard: a ``rooflens`` tab listing the profile runs of the logdir, each
opening its rooflens report (``pip install 'rooflens[tensorboard]'``, then
``tensorboard --logdir L --load_fast=false``). The report of run RUN is served at
``/data/plugin/rooflens/report?run=RUN``.

:mod:`rooflens.tensorboard.runs` finds the runs and builds and caches their reports (no
TensorBoard import); :mod:`rooflens.tensorboard.plugin` is the TensorBoard plugin serving them.
"""
