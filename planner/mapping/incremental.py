"""Incremental evaluation of robust_objective under swaps of two positions (the annealer's inner loop).

The state is the annealer's string: a permutation of the N candidate nodes whose first R*K entries are the grid
in row-major order (position i*K + j = row i, column j), the rest spare nodes. Per scenario the evaluator keeps
  - each column's path terms (term k = hop from row k to row k+1, term R-1 = the wrap hop from row R-1 to row 0
    when the problem has one) and their sum,
  - each row's K ring links (link k = row i's columns k and (k+1) mod K, charged MappingProblem._dp_sym) and
    dp_base[i] + their max,
  - each column's tied-embedding cost (row 0 node, row R-1 node),
so a swap touches at most two columns and two rows: their terms are recomputed from the cost tables and the
column sum / row max is taken afresh over the kept terms (no running +/- deltas, so no floating drift), then the
three maxima. Costs are read from nested Python lists: indexing a numpy array with scalars costs more than the
whole update. The result equals robust_objective(probs, state[:R*K].reshape(R, K), robust) (tested to 1e-12).
"""
from __future__ import annotations

import math

import numpy as np

from planner.mapping.problem import MappingProblem


class _Scenario:
    """One scenario's cost tables (lists) and its current per-column / per-row values."""
    __slots__ = ("hop", "wrap", "dps", "dp_base", "emb", "const", "terms", "path", "links", "ring", "embv",
                 "pm", "rm", "em", "tp", "tr", "pace")

    def __init__(self, p: MappingProblem):
        R, K = p.layout.rows, p.layout.cols
        self.hop = p.hop.tolist()
        self.wrap = p.wrap.tolist() if (p.wrap is not None and R > 1) else None
        self.dp_base = [float(x) for x in p.dp_base]
        self.emb = p.emb.tolist() if (p.emb is not None and R > 1) else None
        self.const = float(p.const)
        # the lock step's pace (problem.Pace), scored per column over its whole node list (a max, not a sum)
        # (weight, base, e, f, lin, c, steep, planes): terms that are all -inf (interleaved's steep pace has no e, f)
        # are left out, which changes no maximum; the per-swap cost is then the boundaries' table lookups alone
        self.pace = None
        if p.pace is not None and R > 1:
            pc = p.pace
            fin_e, fin_f = np.isfinite(pc.e).any(), np.isfinite(pc.f).any()
            self.pace = (float(pc.weight), float(pc.base), [float(x) for x in pc.e] if fin_e else None,
                         [float(x) for x in pc.f] if fin_f else None, tuple(pc.lin),
                         [[float(x) for x in r] for r in pc.c],
                         [[[float(x) for x in r] for r in t] for t in pc.steep_c] or None,
                         [[tuple(float(x) for x in row) for row in q] for q in pc.planes] or None)
        self.dps = []
        if K > 1:
            sym = p._dp_sym
            for i in range(R):          # rows with the same ring table share one list (the family: all rows)
                same = next((k for k in range(i) if np.array_equal(sym[k], sym[i])), None)
                self.dps.append(self.dps[same] if same is not None else sym[i].tolist())


class SwapEvaluator:
    """robust_objective of a string, updated by swaps: v = ev.propose_swap(p, q); ev.accept() keeps the swap
    (else nothing changed). ev.value: the current objective; ev.state: the current string (a list)."""

    def __init__(self, probs: list[MappingProblem], state, robust: str = "worst", tie_level: float | None = None):
        """tie_level: also keep `tie` (and `pending_tie` of a proposal), a secondary score for the plateaus of the
        maxima: over the scenarios, the excess of every column path over tie_level x the slowest path plus the
        excess of every row ring over tie_level x the slowest ring (few columns and rows near their maximum: a
        swap can lower it). Updated by +/- the changed columns' and rows' excess while the maxima stay (it only
        steers acceptance: a drift there cannot touch the objective), taken afresh when a maximum moves."""
        self.level = tie_level
        p0 = probs[0]
        self.R, self.K = p0.layout.rows, p0.layout.cols
        self.nb = self.R * self.K
        self.robust = robust
        self.sc = [_Scenario(p) for p in probs]
        R, K = self.R, self.K
        wrap = self.sc[0].wrap is not None
        self.nterms = (R if wrap else R - 1) if R > 1 else 0
        # per grid position: the path terms (k, position a, position b, wrap?) and ring links (k, a, b) a block
        # there enters (hops from row i-1 and to row i+1, mod R with a wrap; links (j-1, j) and (j, j+1) mod K)
        self._terms_at, self._links_at = [], []
        for x in range(self.nb):
            i, j = divmod(x, K)
            ks = sorted({(i - 1) % R, i} & set(range(self.nterms))) if R > 1 else []
            self._terms_at.append([(k, k * K + j, ((k + 1) % R) * K + j, k == R - 1) for k in ks])
            ls = sorted({(j - 1) % K, j}) if K > 1 else []
            self._links_at.append([(k, i * K + k, i * K + (k + 1) % K) for k in ls])
        self.rebuild(state)

    # -- full evaluation ------------------------------------------------------------------------------------
    def rebuild(self, state) -> None:
        """Score `state` from scratch (after a move that is not a swap)."""
        self.state = [int(x) for x in state]
        for sc in self.sc:
            sc.terms = [[self._term(sc, k, j) for k in range(self.nterms)] for j in range(self.K)]
            sc.path = [sum(t) for t in sc.terms]
            if sc.pace is not None:
                sc.path = [v + self._pace(sc, j) for j, v in enumerate(sc.path)]
            sc.links = [[self._link(sc, i, k) for k in range(self.K)] if self.K > 1 else [] for i in range(self.R)]
            sc.ring = [sc.dp_base[i] + (max(sc.links[i]) if self.K > 1 else 0.0) for i in range(self.R)]
            sc.embv = [self._emb(sc, j) for j in range(self.K)]
            sc.pm, sc.rm, sc.em = (max(sc.path) if self.R > 1 else 0.0), max(sc.ring), max(sc.embv)
            sc.tp = _excess(sc.path, self.level * sc.pm) if self.level is not None else 0.0
            sc.tr = _excess(sc.ring, self.level * sc.rm) if self.level is not None else 0.0
        self.tie = sum(sc.tp + sc.tr for sc in self.sc)
        self.pending_tie = self.tie
        self.objs = [sc.const + sc.pm + sc.rm + sc.em for sc in self.sc]
        self.value = self._combine(self.objs)
        self._pending = None

    def _term(self, sc, k, j):
        s, K = self.state, self.K
        if k == self.R - 1:
            return sc.wrap[s[k * K + j]][s[j]]
        return sc.hop[s[k * K + j]][s[(k + 1) * K + j]]

    def _pace(self, sc, j):
        """Column j's Pace.costs, from the current string (0 without a pace): the same operations in the same
        order as the numpy form."""
        if sc.pace is None:
            return 0.0
        weight, best, e, f, lin, c, steep, planes = sc.pace
        s, K, R = self.state, self.K, self.R
        if e is not None or f is not None or lin:
            h = [c[s[r * K + j]][s[(r + 1) * K + j]] for r in range(R - 1)]
            if e is not None:
                best = max([best] + [x + y for x, y in zip(e, h, strict=True)])
            if f is not None and R > 2:
                best = max([best] + [f[i] + h[i - 1] + h[i] for i in range(1, R - 1)])
        if steep is not None:      # Pace.steep_c per boundary, the wrap (row R-1 -> row 0) last
            best = max([best] + [t[s[r * K + j]][s[((r + 1) % R) * K + j]] for r, t in enumerate(steep)])
        if planes is not None:     # Pace.planes per row, on its boundary above (the wrap for row 0) and below
            for i, q in enumerate(planes):
                if not q:
                    continue
                h1, h2 = c[s[((i - 1) % R) * K + j]][s[i * K + j]], c[s[i * K + j]][s[((i + 1) % R) * K + j]]
                v = math.inf if math.isinf(h1) or math.isinf(h2) else max(x * h1 + y * h2 + z for x, y, z in q)
                best = max(best, v)
        out = weight * best
        for r in lin:
            out = out + h[r]
        return out

    def _link(self, sc, i, k):
        s, K = self.state, self.K
        return sc.dps[i][s[i * K + k]][s[i * K + (k + 1) % K]]

    def _emb(self, sc, j):
        if sc.emb is None:
            return 0.0
        s = self.state
        return sc.emb[s[j]][s[(self.R - 1) * self.K + j]]

    def _combine(self, objs):
        if len(objs) == 1:
            return objs[0]
        return sum(objs) / len(objs) if self.robust == "mean" else max(objs)

    # -- swaps ----------------------------------------------------------------------------------------------
    def propose_swap(self, p: int, q: int) -> float:
        """The objective after swapping positions p and q (nothing changes until accept())."""
        s, K, nb, R = self.state, self.K, self.nb, self.R
        s[p], s[q] = s[q], s[p]
        # the columns and rows the swap touches: (index, updates, touches the embedding pair)
        if q >= nb or p >= nb:
            x = p if p < nb else q
            if x >= nb:                                 # two spare nodes: nothing changes
                s[p], s[q] = s[q], s[p]
                self._pending = (p, q, [((), (), (), sc.pm, sc.rm, sc.em, sc.tp, sc.tr) for sc in self.sc],
                                 self.objs)
                self.pending_tie = self.tie
                return self.value
            i, j = divmod(x, K)
            cols = ((j, self._terms_at[x], i == 0 or i == R - 1),)
            rows = ((i, self._links_at[x]),)
        else:
            ip, jp = divmod(p, K)
            iq, jq = divmod(q, K)
            ep, eq = ip == 0 or ip == R - 1, iq == 0 or iq == R - 1
            if jp == jq:
                cols = ((jp, self._terms_at[p] + self._terms_at[q], ep or eq),)
            else:
                cols = ((jp, self._terms_at[p], ep), (jq, self._terms_at[q], eq))
            if ip == iq:
                rows = ((ip, self._links_at[p] + self._links_at[q]),)
            else:
                rows = ((ip, self._links_at[p]), (iq, self._links_at[q]))
        new, objs = [], []
        level, tie = self.level, 0.0
        for sc in self.sc:
            hop, wrap, emb = sc.hop, sc.wrap, sc.emb
            # a maximum is taken afresh over all columns / rows only when a changed one held it
            path, pm, em = sc.path, sc.pm, sc.em
            ncols, nrows, nembs = [], [], []
            full = False
            for j, upd, e in cols:
                t = sc.terms[j][:]
                for k, a, b, w in upd:
                    t[k] = wrap[s[a]][s[b]] if w else hop[s[a]][s[b]]
                v = sum(t)
                if sc.pace is not None:
                    v += self._pace(sc, j)
                ncols.append((j, t, v))
                if path[j] == sc.pm:
                    full = True
                elif v > pm:
                    pm = v
                if e and emb is not None:
                    nembs.append((j, emb[s[j]][s[(R - 1) * K + j]]))
            if full:
                path = path[:]
                for j, _, v in ncols:
                    path[j] = v
                pm = max(path)
            if nembs:
                embv = sc.embv[:]
                for j, v in nembs:
                    embv[j] = v
                em = max(embv)
            rm = sc.rm
            if K > 1:
                ring, full = sc.ring, False
                for i, upd in rows:
                    lk = sc.links[i][:]
                    tab = sc.dps[i]
                    for k, a, b in upd:
                        lk[k] = tab[s[a]][s[b]]
                    v = sc.dp_base[i] + max(lk)
                    nrows.append((i, lk, v))
                    if ring[i] == sc.rm:
                        full = True
                    elif v > rm:
                        rm = v
                if full:
                    ring = ring[:]
                    for i, _, v in nrows:
                        ring[i] = v
                    rm = max(ring)
            tp, tr = sc.tp, sc.tr
            if level is not None:
                tp, tr = self._tie(sc.path, ncols, sc.pm, pm, tp), self._tie(sc.ring, nrows, sc.rm, rm, tr)
                tie += tp + tr
            new.append((ncols, nrows, nembs, pm, rm, em, tp, tr))
            objs.append(sc.const + pm + rm + em)
        s[p], s[q] = s[q], s[p]
        self._pending = (p, q, new, objs)
        self.pending_tie = tie
        return self._combine(objs)

    def _tie(self, vals, changed, old_max, new_max, old_tie):
        """The excess of `vals` with `changed` ((index, _, value), ...) applied over level x new_max."""
        lv = self.level * new_max
        if new_max != old_max:
            vals = vals[:]
            for x, _, v in changed:
                vals[x] = v
            return _excess(vals, lv)
        for x, _, v in changed:
            old_tie += (v - lv if v > lv else 0.0) - (vals[x] - lv if vals[x] > lv else 0.0)
        return old_tie

    def accept(self) -> None:
        """Keep the last proposed swap."""
        p, q, new, objs = self._pending
        s = self.state
        s[p], s[q] = s[q], s[p]
        for sc, (ncols, nrows, nembs, sc.pm, sc.rm, sc.em, sc.tp, sc.tr) in zip(self.sc, new):
            for j, t, v in ncols:
                sc.terms[j] = t
                sc.path[j] = v
            for i, lk, v in nrows:
                sc.links[i] = lk
                sc.ring[i] = v
            for j, v in nembs:
                sc.embv[j] = v
        self.objs = objs
        self.value = self._combine(objs)
        self.tie = self.pending_tie
        self._pending = None

    # -- what is critical -----------------------------------------------------------------------------------
    def _critical_scenario(self):
        return self.sc[self.objs.index(max(self.objs))]

    def critical_column(self) -> int:
        """The slowest column (path) of the scenario with the largest objective."""
        path = self._critical_scenario().path
        return path.index(max(path)) if path else 0

    def critical_row(self) -> int:
        """The slowest row (ring) of the scenario with the largest objective."""
        ring = self._critical_scenario().ring
        return ring.index(max(ring))


def _excess(vals, level: float) -> float:
    return sum(v - level for v in vals if v > level)


def tie_score(vals, level: float) -> float:
    """SwapEvaluator's tie of one kind of values (the columns' paths or the rows' rings): their excess over
    level x their maximum (lns.py keeps its search on the same plateaus)."""
    return _excess(vals, level * max(vals))
