"""Putting a lowered region back (DESIGN.md, "Core v2": Regions): the region's nodes in
the main graph replaced by its lowered sub-model's, in the region's place, with the
initializers, value infos, opsets and report entries the lowering made. ``splice`` says
None where the two do not fit; the caller then lowers the whole model."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import onnx

from seqlower.fastpath.regions import DEFAULT_DOMAINS, Region, inner_names
from seqlower.io.protos import outer_reads, subgraphs_of

__all__ = ["splice", "reads_of", "topological"]

# A splice that removes and inserts at most this many nodes edits the node list in place;
# more, and one rebuilt list is cheaper than that many shifts.
_IN_PLACE = 512


@dataclass
class _Lowered:
    """One walk of the lowered nodes (tens of thousands, copies of a template)."""
    made: set[str]  # every name they make, in subgraphs too
    reads: set[str]  # the region's constants they read (a bypassed Identity's input included)
    identities: bool  # whether any is an Identity (one may only rename a value)


def _walk_lowered(lowered: onnx.ModelProto, nodes: list[onnx.NodeProto], constants: set[str]) -> _Lowered:
    made = {t.name for t in lowered.graph.initializer}
    reads: set[str] = set()
    identities = False
    for n in nodes:
        made.update(n.output)
        if n.attribute:
            made |= inner_names(n)
            if constants:
                reads.update(constants.intersection(outer_reads(n)))
        elif constants and not constants.isdisjoint(n.input):
            reads.update(constants.intersection(n.input))
        identities = identities or n.op_type == "Identity"
    made.discard("")
    return _Lowered(made, reads, identities)


def splice(model: onnx.ModelProto, region: Region, lowered: onnx.ModelProto,
           nodes: list[onnx.NodeProto] | None = None, value_info: Sequence[onnx.ValueInfoProto] = (),
           ) -> onnx.ModelProto | None:
    """``model`` with the region's nodes replaced by ``lowered``'s (its lowered sub-model),
    or None when the two do not fit (a name taken twice, an input or output lost); the
    caller then lowers the whole model. ``model`` is changed in place on success.
    ``nodes``: ``lowered``'s nodes, kept out of its graph; ``value_info``: value infos of
    ``lowered`` beside its graph's (copies made for the model, one copy into a graph less:
    ``seqlower.fastpath.copies.assemble``)."""
    g, lg = model.graph, lowered.graph
    lowered_nodes = list(lg.node) if nodes is None else nodes
    if [v.name for v in lg.input] != region.model_inputs or [v.name for v in lg.output] != region.outputs:
        return None
    walked = _walk_lowered(lowered, lowered_nodes, region.own_constants | region.constant_nodes.keys())
    if not walked.made.isdisjoint(region.reserved):
        return None
    last_producer = region.last_producer
    if region.constant_nodes:
        last_producer = max([last_producer, *(i for x, i in region.constant_nodes.items() if x in walked.reads)])
    # Where the region began, unless an input is made later: the untouched nodes keep their
    # order around it, and lowering the output again puts everything where it was.
    at = max(region.nodes[0], last_producer + 1)
    rename, region_nodes = _bypass_identities(lowered_nodes, set(region.outputs) - {v.name for v in g.output}) \
        if walked.identities else ({}, lowered_nodes)
    # Constants only the region read, which its lowering no longer reads, go with it.
    dropped = region.own_constants - walked.reads
    remove = sorted(set(region.nodes) | {region.constant_nodes[x] for x in dropped if x in region.constant_nodes})
    merged = None
    # Region nodes with untouched ones between them (a quirk's op, such as OpenVINO's
    # Unsqueeze, anywhere in the graph): the same ordering, or the untouched ones would
    # move and a second lowering would not give the same model.
    interleaved = region.nodes[-1] - region.nodes[0] + 1 != len(region.nodes)
    if last_producer >= region.first_reader or interleaved:
        merged = _merged_order(list(g.node), region, region_nodes, remove, rename)
        if merged is None:
            return None
        at = 0
    if rename:
        in_region = set(region.nodes)
        for i in range(at, len(g.node)):
            if i not in in_region and not rename.keys().isdisjoint(region.reads[i]):
                _rename_reads(g.node[i], rename)
    _replace_nodes(g, merged, remove, region_nodes, at)
    have = _replace_initializers(g, lg, region, dropped)
    _replace_value_infos(g, lowered, value_info, region, skip={v.name for v in g.output} | set(rename) | have
                         | region.constants)
    have_ops = {(o.domain, o.version) for o in model.opset_import}
    model.opset_import.extend(o for o in lowered.opset_import if (o.domain, o.version) not in have_ops)
    for prop in lowered.metadata_props:
        if prop.key.startswith("seqlower."):
            model.metadata_props.add(key=prop.key, value=prop.value)
    return model


def _merged_order(model_nodes: list[onnx.NodeProto], region: Region, region_nodes: list[onnx.NodeProto],
                  remove: list[int], rename: dict[str, str]) -> list[onnx.NodeProto] | None:
    """The region reads what a reader of its outputs makes (blocks with other nodes
    between them): no one place fits, so every node goes where what it reads is made, the
    untouched ones in their order and the lowered ones where the region began. None: the
    lowering joined what the model kept apart (a cycle)."""
    gone = set(remove)
    kept = [i for i in range(len(model_nodes)) if i not in gone]
    # A node the lowering kept (by name) goes where it was, the new ones after the one
    # before them: lowering a lowered model again puts every node where it was.
    was = {model_nodes[i].name: i for i in region.nodes if model_nodes[i].name}
    places, place = [], region.nodes[0]
    for n in region_nodes:
        place = was.get(n.name, place) if n.name else place
        places.append(place)
    return topological([*(model_nodes[i] for i in kept), *region_nodes], [*kept, *places],
                       [*([rename.get(x, x) for x in region.reads[i]] for i in kept),
                        *(reads_of(n) for n in region_nodes)])


def _replace_nodes(g: onnx.GraphProto, merged: list[onnx.NodeProto] | None, remove: list[int],
                   region_nodes: list[onnx.NodeProto], at: int) -> None:
    if merged is not None:
        del g.node[:]
        g.node.extend(merged)
    elif len(remove) + len(region_nodes) <= _IN_PLACE:
        # In place: the untouched nodes are not copied (a rebuilt list copies every node).
        place = at - sum(1 for i in remove if i < at)
        for i in reversed(remove):
            del g.node[i]
        for k, n in enumerate(region_nodes):
            g.node.insert(place + k, n)
    else:
        gone = set(remove)
        model_nodes = list(g.node)
        new_nodes = [*(n for i, n in enumerate(model_nodes) if i not in gone and i < at), *region_nodes,
                     *(n for i, n in enumerate(model_nodes) if i not in gone and i >= at)]
        del g.node[:]
        g.node.extend(new_nodes)


def _replace_initializers(g: onnx.GraphProto, lg: onnx.GraphProto, region: Region, dropped: set[str]) -> set[str]:
    """The constants only the region read go; the lowering's new initializers come in.
    Gives the names of the graph's initializers after."""
    have = {t.name for t in g.initializer}
    if not dropped.isdisjoint(have):
        kept_inits = [t for t in g.initializer if t.name not in dropped]
        del g.initializer[:]
        g.initializer.extend(kept_inits)
        have -= dropped
    added = [t for t in lg.initializer if t.name not in have and t.name not in region.constants]
    g.initializer.extend(added)
    have.update(t.name for t in added)
    return have


def _replace_value_infos(g: onnx.GraphProto, lowered: onnx.ModelProto, value_info: Sequence[onnx.ValueInfoProto],
                         region: Region, skip: set[str]) -> None:
    """The region's old value infos go (sequence types the lowering removed), the lowered
    sub-model's come in; a model output the region makes is declared as the lowering
    declares it (a declared shape a keepdims policy corrected)."""
    lg = lowered.graph
    lowered_types = {v.name: v.type for v in lg.output}
    for v in g.output:
        if v.name in lowered_types and v.type != lowered_types[v.name]:
            v.type.CopyFrom(lowered_types[v.name])
    # An entry the lowering still types keeps its place, so lowering again changes nothing.
    new = {v.name: v for v in (*lg.value_info, *value_info, *lg.output)
           if v.name not in skip and v.type.WhichOneof("value")}
    old = region.names
    keep = [new.pop(v.name, v) for v in g.value_info if v.name not in old or v.name in new]
    keep.extend(new.values())
    del g.value_info[:]
    g.value_info.extend(keep)


def reads_of(node: onnx.NodeProto) -> list[str] | set[str]:
    return outer_reads(node) if node.attribute and subgraphs_of(node) else node.input[:]


def topological(nodes: list[onnx.NodeProto], priorities: Sequence[int] | None = None,
                reads: Sequence[Iterable[str]] | None = None, outputs: Sequence[Iterable[str]] | None = None,
                ) -> list[onnx.NodeProto] | None:
    """``nodes`` in an order where each is after what makes what it reads (``reads``, else
    read off the nodes) and makes (``outputs``, else read off the nodes); of the nodes that
    may go next, the one of lowest priority (else the first in ``nodes``). None: they make
    a cycle."""
    reads = reads if reads is not None else [reads_of(n) for n in nodes]
    made = {o: k for k, outs in enumerate(outputs if outputs is not None else (n.output for n in nodes))
            for o in outs if o}
    if priorities is None and all(made.get(x, -1) < k for k, r in enumerate(reads) for x in r):
        return nodes  # in order already (copies of a chain of blocks)
    needs = [0] * len(nodes)
    readers: list[list[int]] = [[] for _ in nodes]
    for k, r in enumerate(reads):
        deps = {made[x] for x in r if x in made and made[x] != k}
        needs[k] = len(deps)
        for d in deps:
            readers[d].append(k)
    rank = priorities if priorities is not None else range(len(nodes))
    ready = [(rank[k], k) for k, c in enumerate(needs) if c == 0]
    heapq.heapify(ready)
    order: list[onnx.NodeProto] = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(nodes[k])
        for r in readers[k]:
            needs[r] -= 1
            if needs[r] == 0:
                heapq.heappush(ready, (rank[r], r))
    return order if len(order) == len(nodes) else None


def _bypass_identities(nodes: list[onnx.NodeProto], internal: set[str]) -> tuple[dict[str, str], list[onnx.NodeProto]]:
    """The lowered region's nodes without the Identities that only hand a value to the rest
    of the model under its old name (a Split/Concat pair that cancels out leaves one), and
    the renaming the readers of those names take to read the value itself."""
    rename: dict[str, str] = {}
    kept: list[onnx.NodeProto] = []
    for n in nodes:
        if n.op_type == "Identity" and n.domain in DEFAULT_DOMAINS and n.output[0] in internal:
            rename[n.output[0]] = rename.get(n.input[0], n.input[0])
        else:
            kept.append(n)
    return rename, kept


def _rename_reads(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    for k, x in enumerate(node.input):
        if x in rename:
            node.input[k] = rename[x]
    for sub in subgraphs_of(node):
        for n in sub.node:
            _rename_reads(n, rename)
        for v in sub.output:  # a subgraph output that is an outer value, named directly
            if v.name in rename:
                v.name = rename[v.name]

