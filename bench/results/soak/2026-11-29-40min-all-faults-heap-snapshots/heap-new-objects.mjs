// node heapnew.mjs a b [filterName]: objects in b whose id is not in a (allocated since and still alive), grouped by retainer path (2 levels)
import { readFileSync } from 'node:fs';
const load = (p) => JSON.parse(readFileSync(p, 'utf8'));
const A = load(process.argv[2]); const B = load(process.argv[3]); const filter = process.argv[4];
const nf = B.snapshot.meta.node_fields.length, ef = B.snapshot.meta.edge_fields.length;
const fi = (m, n) => m.indexOf(n);
const NF = B.snapshot.meta.node_fields, EF = B.snapshot.meta.edge_fields;
const T = fi(NF, 'type'), N = fi(NF, 'name'), I = fi(NF, 'id'), S = fi(NF, 'self_size'), EC = fi(NF, 'edge_count');
const ET = fi(EF, 'type'), EN = fi(EF, 'name_or_index'), ETO = fi(EF, 'to_node');
const ntypes = B.snapshot.meta.node_types[0], etypes = B.snapshot.meta.edge_types[0];
const idsA = new Set(); for (let i = 0; i < A.nodes.length; i += nf) idsA.add(A.nodes[i + I]);
const nodes = B.nodes, edges = B.edges, str = B.strings; const count = nodes.length / nf;
const firstEdge = new Uint32Array(count + 1); let e = 0;
for (let k = 0; k < count; k++) { firstEdge[k] = e; e += nodes[k * nf + EC] * ef; } firstEdge[count] = e;
const retainers = Array.from({ length: count }, () => []);
for (let k = 0; k < count; k++) for (let x = firstEdge[k]; x < firstEdge[k + 1]; x += ef) {
  const et = etypes[edges[x + ET]]; if (et === 'weak' || et === 'shortcut') continue;
  const to = edges[x + ETO] / nf; const name = et === 'element' || et === 'hidden' ? `[${edges[x + EN]}]` : str[edges[x + EN]];
  retainers[to].push([k, name]); }
const label = (k) => { const t = ntypes[nodes[k * nf + T]]; let n = str[nodes[k * nf + N]]; if (n.length > 50) n = n.slice(0, 50); return `${t}:${n}`; };
const groups = new Map();
for (let k = 0; k < count; k++) {
  if (idsA.has(nodes[k * nf + I])) continue;
  const l = label(k); if (filter && !l.includes(filter)) continue;
  const r = retainers[k][0]; let path = l;
  if (r) { path += ` <-${r[1]}- ${label(r[0])}`; const r2 = retainers[r[0]][0]; if (r2) { path += ` <-${r2[1]}- ${label(r2[0])}`; const r3 = retainers[r2[0]][0]; if (r3) path += ` <-${r3[1]}- ${label(r3[0])}`; } }
  path = path.replace(/\[\d+\]/g, '[n]');
  const g = groups.get(path) ?? { n: 0, size: 0 }; g.n++; g.size += nodes[k * nf + S]; groups.set(path, g);
}
const rows = [...groups].sort((a, b) => b[1].size - a[1].size).slice(0, Number(process.argv[5] ?? 25));
for (const [p, g] of rows) console.log(`${String(g.n).padStart(6)} ${(g.size / 1024).toFixed(1).padStart(8)} KB  ${p}`);
