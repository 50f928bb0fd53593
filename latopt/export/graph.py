"""The exported ONNX file: latopt's exporter at a dynamic batch, nodes tagged with the block they come from.

Public API::

    write_onnx(plan, path) -> Path                dynamic-batch ONNX of ``plan.folded``, tagged and fully checked
    tag_block_nodes(onnx_path, model, plan)       node names prefixed ``bII/``; block map in the metadata
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from torch import nn

from latopt.export.shipped import Plan
from latopt.latency.onnx_io import export_onnx
from latopt.nets.blocks import find_blocks


def write_onnx(p: Plan, path: Path) -> Path:
    """``p.folded`` as ONNX at ``path`` (opset 17, dynamic batch, input ``p.resolution``), nodes tagged with
    their block and checked by ``onnx.checker`` with ``full_check``."""
    export_onnx(p.folded, (1, 3, p.resolution, p.resolution), path, dynamic_batch=True)
    tag_block_nodes(path, p.folded, p.plan)
    return path


def tag_block_nodes(onnx_path: Path, model: nn.Module, plan: dict[int, str]) -> None:
    """Prefix every node that comes from block i with ``bII/`` and record the block map in metadata."""
    m = onnx.load(str(onnx_path))
    blocks = find_blocks(model)
    # Scoped node names carry the module path as "/blocks/blocks.1/blocks.1.0/..." or "/features.2/...".
    keys = sorted(((b.path, b.index) for b in blocks), key=lambda t: -len(t[0]))
    for node in m.graph.node:
        for path, idx in keys:
            if f"/{path}/" in node.name + "/" or f"/{path.replace('.', '/')}/" in node.name + "/":
                node.name = f"b{idx:02d}{node.name if node.name.startswith('/') else '/' + node.name}"
                break
    info = {str(b.index): {"path": b.path, "folded": plan.get(b.index)} for b in blocks}
    entry = m.metadata_props.add()
    entry.key, entry.value = "latopt.blocks", json.dumps(info)
    onnx.save(m, str(onnx_path))
    onnx.checker.check_model(str(onnx_path), full_check=True)
