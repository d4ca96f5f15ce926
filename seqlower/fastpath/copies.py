"""Copies of a template's lowering (``seqlower.fastpath.repeats``): every member of a group
takes the template's lowered nodes, constants, value infos, rewrites and notes under its
own names, and the region's whole lowering is assembled from them and the rest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from seqlower.fastpath.regions import Region
from seqlower.fastpath.repeats import Group, Member, renamed, symbol_names
from seqlower.fastpath.splice import reads_of, topological
from seqlower.io.protos import names_dims, outer_reads, own_names, subgraphs_of

__all__ = ["Instances", "assemble", "instantiate", "rename"]


@dataclass
class Instances:
    """A group's copies of its template's lowering."""
    nodes: list[onnx.NodeProto]  # every member's, member after member
    reads: list[list[str] | set[str]]  # what each of them reads (``splice.topological``'s)
    made: list[list[str]]  # what each of them makes
    first: list[int]  # per member, the main-graph index of its first node (where its nodes go)
    counts: list[int]  # per member, how many nodes it has in ``nodes``
    initializers: list[onnx.TensorProto]  # the template's own constants, once
    value_info: list[onnx.ValueInfoProto]
    outputs: dict[str, onnx.TypeProto]  # type of each member output
    rewrites: list[dict[str, str]]
    notes: list[str]


def _names_of(lowered: onnx.GraphProto) -> list[str]:
    """Every name the lowered template makes: node outputs and its subgraphs' own names."""
    names = [o for n in lowered.node for o in n.output if o]
    names += own_names(g for n in lowered.node if n.attribute for g in subgraphs_of(n))
    return list(dict.fromkeys(names))


def instantiate(group: Group, lowered: onnx.ModelProto, rewrites: list[dict[str, str]], notes: list[str],
                taken: set[str], node_names: set[str]) -> Instances:
    """Every member's copy of ``lowered`` (the first member's lowering, which ``fits``),
    named after the member's own values. ``taken``: every value name the model has;
    ``node_names``: every node name (onnxruntime refuses two nodes of one name). The new
    names are added to them."""
    rep = group.members[0]
    lg = lowered.graph
    template = _Template(rep, lg, taken)
    out = Instances([], [], [], [], [], template.initializers, [], {}, [], [])
    label_of = {lab: k for k, lab in enumerate(rep.labels)}
    # Each rewrite with its node's place in the member, and whether it names a subgraph
    # (which the member's own labels rename, as they do the notes).
    prepared = [(r, label_of.get(r["node"]), r.get("graph", "main") != "main") for r in rewrites]
    relabeled = bool(notes) or any(in_subgraph for _, _, in_subgraph in prepared)
    out_types = {v.name: v.type for v in lg.output}
    # (with whether the type names a dim, which a copy renames: most have none)
    infos = [(v, names_dims(v.type)) for v in lg.value_info if v.name in template.own or v.name in rep.outputs]
    named_outputs = {o for o in rep.outputs if names_dims(out_types[o])}
    for j, m in enumerate(group.members):
        names = template.names_for(m, j, taken)
        template.copy_nodes(m, j, names, node_names, out)
        dims, suffix = symbol_names(group, j)
        for v, named in infos:
            c = onnx.ValueInfoProto()
            c.CopyFrom(v)
            c.name = names[v.name]
            if named and (dims or suffix):
                c.type.CopyFrom(renamed(v.type, dims, suffix))
            out.value_info.append(c)
        for o, mo in zip(rep.outputs, m.outputs):
            out.outputs[mo] = renamed(out_types[o], dims, suffix) if o in named_outputs else out_types[o]
        relabel = {lab: m.labels[k] for lab, k in label_of.items()} if relabeled else {}
        for r, k, in_subgraph in prepared:
            e = dict(r)
            if k is not None:
                e["node"] = m.labels[k]
            if in_subgraph:
                for a, b in relabel.items():
                    e["graph"] = e["graph"].replace(a, b)
            out.rewrites.append(e)
        for note in notes:
            for a, b in relabel.items():
                note = note.replace(a, b)
            out.notes.append(note)
    return out


class _Template:
    """What every copy of a template's lowering reads of it: its own names (each made
    after the member value it was made after: ``m0_stacked`` after ``m0``), its
    constants (added once, under a free name) and its nodes."""

    def __init__(self, rep: Member, lg: onnx.GraphProto, taken: set[str]) -> None:
        self.rep = rep
        boundary = {*rep.outputs, *rep.inputs}
        self.own = [x for x in _names_of(lg) if x not in boundary]  # (in order: the names are the same every run)
        self.theirs = sorted(((x, k) for k, x in enumerate([*rep.inputs, *rep.values]) if x), key=lambda p: -len(p[0]))
        self.stems = {t: self.stem(t) for t in self.own}
        name_stems = {n.name: self.stem(n.name) for n in lg.node if n.name}
        self.shared: dict[str, str] = {}
        self.initializers: list[onnx.TensorProto] = []
        for t in lg.initializer:
            if t.name in rep.inputs:
                continue
            name = _free(t.name, taken)
            self.shared[t.name] = name
            c = onnx.TensorProto()
            c.CopyFrom(t)
            c.name = name
            self.initializers.append(c)
        # (each node with what every copy reads of it: its names, and its name's stem)
        self.nodes = [(n, n.input[:], n.output[:], bool(subgraphs_of(n)), n.name,
                       name_stems.get(n.name) if n.name else None) for n in lg.node]

    def stem(self, name: str) -> tuple[int, str] | None:
        for x, k in self.theirs:
            if name.startswith(x) and name != x:
                return k, name[len(x):]
        return None

    def names_for(self, m: Member, j: int, taken: set[str]) -> dict[str, str]:
        """Member ``m``'s (the ``j``th) name for each name of the template."""
        rep, counterpart = self.rep, [*m.inputs, *m.values]
        names: dict[str, str] = dict(self.shared)
        names.update(zip(rep.inputs, m.inputs))
        names.update(zip(rep.outputs, m.outputs))
        for t in self.own:
            s = self.stems[t]
            names[t] = _free(counterpart[s[0]] + s[1] if s is not None else f"{t}_{j}", taken)
        return names

    def copy_nodes(self, m: Member, j: int, names: dict[str, str], node_names: set[str], out: Instances) -> None:
        counterpart = [*m.inputs, *m.values]
        get = names.get
        for n, ins, outs, nested, name, s in self.nodes:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            made = [get(x, x) for x in outs]
            if nested:
                rename(c, names, all_names=True)
                out.reads.append(outer_reads(c))
            else:
                reads = [get(x, x) for x in ins]
                c.input[:] = reads
                c.output[:] = made
                out.reads.append(reads)
            out.made.append(made)
            if name:
                c.name = _free(counterpart[s[0]] + s[1] if s is not None else f"{name}_{j}", node_names)
            out.nodes.append(c)
        out.first.append(m.nodes[0])
        out.counts.append(len(self.nodes))


def rename(node: onnx.NodeProto, names: Mapping[str, str], *, all_names: bool) -> None:
    """Rename in place what ``node`` reads (``all_names``: and makes, its subgraphs' own
    names included) by ``names``."""
    ins = node.input
    if not names.keys().isdisjoint(ins):
        ins[:] = [names.get(x, x) for x in ins]
    if all_names and not names.keys().isdisjoint(node.output):
        node.output[:] = [names.get(x, x) for x in node.output]
    if not node.attribute:
        return
    for g in subgraphs_of(node):
        if all_names:
            for v in (*g.input, *g.value_info):
                if v.name in names:
                    v.name = names[v.name]
            for t in g.initializer:
                if t.name in names:
                    t.name = names[t.name]
        for v in g.output:
            if v.name in names:
                v.name = names[v.name]
        for n in g.node:
            rename(n, names, all_names=all_names)


def _free(name: str, taken: set[str]) -> str:
    """``name``, or the first ``name_k`` no one has; taken from now on."""
    got, k = name, 0
    while got in taken:
        k += 1
        got = f"{name}_{k}"
    taken.add(got)
    return got


def assemble(region: Region, rest: onnx.ModelProto | None, instances: list[Instances], rest_at: int | None = None,
             ) -> tuple[onnx.ModelProto, list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
    """The region's whole lowering as ``splice`` takes it: ``rest`` (the lowered sub-model
    of what was not lowered apart) and every group's copies, in an order that makes each
    value before it is read, keeping the model's order where it can; its nodes and the
    copies' value infos apart from its graph (``splice``'s ``nodes`` and ``value_info``).
    ``rest_at``: where the first node of the rest was in the model (else where the region
    began)."""
    lowered = onnx.ModelProto()
    if rest is not None:
        lowered.CopyFrom(rest)
        del lowered.graph.node[:]
        del lowered.graph.input[:]
        del lowered.graph.output[:]
    g = lowered.graph
    rest_nodes = list(rest.graph.node) if rest is not None else []
    # Where each node was in the model: a member's copies where the member began; the
    # rest's nodes where the rest began (a stack's last block lowered in place, or the
    # Identity after it, goes after the copies: no sort has to move it there).
    at = region.nodes[0] if rest_at is None else rest_at
    placed: list[tuple[int, int, int]] = [(at, -1, k) for k in range(len(rest_nodes))]
    infos: list[onnx.ValueInfoProto] = []
    for j, inst in enumerate(instances):
        k = 0
        for first, count in zip(inst.first, inst.counts):
            placed.extend((first, j, i) for i in range(k, k + count))
            k += count
        g.initializer.extend(inst.initializers)
        infos.extend(inst.value_info)
    placed.sort(key=lambda p: p[0])
    nodes = [rest_nodes[i] if j < 0 else instances[j].nodes[i] for _, j, i in placed]
    reads = [reads_of(rest_nodes[i]) if j < 0 else instances[j].reads[i] for _, j, i in placed]
    made = [rest_nodes[i].output[:] if j < 0 else instances[j].made[i] for _, j, i in placed]
    order = topological(nodes, reads=reads, outputs=made)
    if order is None:
        raise AssertionError("the lowered region has a cycle (internal error)")
    g.input.extend(onnx.ValueInfoProto(name=x) for x in region.model_inputs)
    rest_out = {v.name: v for v in rest.graph.output} if rest is not None else {}
    for x in region.outputs:
        v = onnx.ValueInfoProto(name=x)
        if x in rest_out:
            v.CopyFrom(rest_out[x])
        else:
            for inst in instances:
                if x in inst.outputs:
                    v.type.CopyFrom(inst.outputs[x])
                    break
        g.output.append(v)
    return lowered, order, infos
