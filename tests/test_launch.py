"""Per-op launch cost only where ops are launched one by one (issue 27).

XLA:GPU records runs of commands as one CUDA graph: its CommandBufferScheduling pass moves them
into computations named ``command_buffer`` called by a ``call``. The HLO below is real: openxla/xla
``xla/backends/gpu/runtime/command_buffer_test.cc`` (ControlDependencyTest), a command buffer of two
fusions.
"""

from __future__ import annotations

import rooflens as rl
from rooflens.analysis.rules.kernels import graph_launched

COMMAND_BUFFER_HLO = """HloModule m

%x (a: f32[3200,6400]) -> f32[3200,6400] {
  %a = f32[3200,6400]{1,0} parameter(0)
  ROOT %b = f32[3200,6400]{1,0} negate(%a)
}

%y (a.1: f32[3200,6400]) -> f32[3200,6400] {
  %a.1 = f32[3200,6400]{1,0} parameter(0)
  ROOT %b.1 = f32[3200,6400]{1,0} add(%a.1, %a.1)
}

%command_buffer (p: f32[3200,6400], p.1: f32[3200,6400]) -> (f32[3200,6400], f32[3200,6400]) {
  %p = f32[3200,6400]{1,0} parameter(0)
  %p.1 = f32[3200,6400]{1,0} parameter(1)
  %b.2 = f32[3200,6400]{1,0} fusion(%p), kind=kLoop, calls=%x
  %c = f32[3200,6400]{1,0} fusion(%p.1), kind=kLoop, calls=%y, control-predecessors={%b.2}
  ROOT %tuple = (f32[3200,6400]{1,0}, f32[3200,6400]{1,0}) tuple(%b.2, %c)
}

ENTRY %e (m: f32[3200,6400], n: f32[3200,6400]) -> (f32[3200,6400], f32[3200,6400]) {
  %m = f32[3200,6400]{1,0} parameter(0)
  %n = f32[3200,6400]{1,0} parameter(1)
  %call = (f32[3200,6400]{1,0}, f32[3200,6400]{1,0}) call(%m, %n), to_apply=%command_buffer
  %get-tuple-element = f32[3200,6400]{1,0} get-tuple-element(%call), index=0
  %get-tuple-element.1 = f32[3200,6400]{1,0} get-tuple-element(%call), index=1
  ROOT %t = (f32[3200,6400]{1,0}, f32[3200,6400]{1,0}) tuple(%get-tuple-element, %get-tuple-element.1)
}
"""


def test_ops_inside_a_command_buffer_are_graph_launched():
    m = rl.hlo.parse(COMMAND_BUFFER_HLO)
    inside = {name for _, name in graph_launched({"jit_e": m})}
    assert {"b.2", "c", "tuple"} <= inside  # the fusions the graph launches (and their fused bodies)
    assert not inside & {"call", "m", "n", "t", "get-tuple-element"}  # the entry's own ops are not in it

