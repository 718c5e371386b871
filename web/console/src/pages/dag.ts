// A plan's or run's DAG drawn as SVG: nodes in layers by dependency,
// coloured by state when a run's node states are given.
import { s, short } from "../dom";
import type { Schemas } from "../api";

type Node = Schemas["v1Node"];

const W = 170;
const H = 44;
const GX = 50;
const GY = 20;

export function dagSVG(nodes: Node[], states: Record<string, string | undefined> = {}): SVGElement {
  const layer = layers(nodes);
  const rows: Record<number, number> = {};
  const pos = new Map<string, { x: number; y: number }>();
  for (const n of nodes) {
    const l = layer.get(n.id ?? "") ?? 0;
    const row = (rows[l] = (rows[l] ?? -1) + 1);
    pos.set(n.id ?? "", { x: 10 + l * (W + GX), y: 10 + row * (H + GY) });
  }
  const width = 20 + (Math.max(0, ...layer.values()) + 1) * (W + GX) - GX;
  const height = 20 + (Math.max(0, ...Object.values(rows)) + 1) * (H + GY) - GY;
  const label = `Plan graph: ${nodes.length} steps`;
  const svg = s(
    "svg",
    { class: "dag", role: "img", "aria-label": label, viewBox: `0 0 ${width} ${height}`, width, height },
    s("title", {}, label),
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" }, s("path", { d: "M0,0 L10,5 L0,10 z" }))),
  );
  for (const n of nodes) {
    const to = pos.get(n.id ?? "")!;
    for (const dep of n.dependsOn ?? []) {
      const from = pos.get(dep);
      if (!from) continue;
      svg.append(s("line", { class: "edge", x1: from.x + W, y1: from.y + H / 2, x2: to.x, y2: to.y + H / 2, "marker-end": "url(#arrow)" }));
    }
  }
  for (const n of nodes) {
    const p = pos.get(n.id ?? "")!;
    const state = short(states[n.id ?? ""], "NODE_STATE_");
    svg.append(
      s(
        "g",
        { class: `dag-node ${state.replace(/ /g, "-")}`, "data-node": n.id ?? "" },
        s("title", {}, `${n.id}: ${n.name ?? ""}${state ? ` (${state})` : ""}`),
        s("rect", { x: p.x, y: p.y, width: W, height: H, rx: 6 }),
        s("text", { x: p.x + 8, y: p.y + 18 }, clip(n.name || n.id || "", 22)),
        s("text", { x: p.x + 8, y: p.y + 35, class: "sub" }, clip([n.role, state].filter(Boolean).join(" · "), 26)),
      ),
    );
  }
  return svg;
}

function clip(t: string, n: number): string {
  return t.length > n ? t.slice(0, n - 1) + "…" : t;
}

// layers puts each node one layer after its deepest dependency.
function layers(nodes: Node[]): Map<string, number> {
  const byId = new Map(nodes.map((n) => [n.id ?? "", n]));
  const out = new Map<string, number>();
  const visit = (id: string, guard: Set<string>): number => {
    const known = out.get(id);
    if (known !== undefined) return known;
    if (guard.has(id)) return 0;
    guard.add(id);
    const deps = byId.get(id)?.dependsOn ?? [];
    const l = deps.length ? Math.max(...deps.map((d) => (byId.has(d) ? visit(d, guard) + 1 : 0))) : 0;
    out.set(id, l);
    return l;
  };
  for (const n of nodes) visit(n.id ?? "", new Set());
  return out;
}
