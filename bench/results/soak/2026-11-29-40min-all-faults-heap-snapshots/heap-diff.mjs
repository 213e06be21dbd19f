// node /tmp/heapdiff.mjs a.heapsnapshot b.heapsnapshot : self size and count by (type, name), b - a, top growers
import { readFileSync } from 'node:fs';
function summarize(path) {
  const snap = JSON.parse(readFileSync(path, 'utf8'));
  const meta = snap.snapshot.meta;
  const fields = meta.node_fields; const nf = fields.length;
  const typeIdx = fields.indexOf('type'), nameIdx = fields.indexOf('name'), sizeIdx = fields.indexOf('self_size');
  const types = meta.node_types[0];
  const nodes = snap.nodes, strings = snap.strings;
  const by = new Map(); let total = 0;
  for (let i = 0; i < nodes.length; i += nf) {
    const type = types[nodes[i + typeIdx]];
    let name = strings[nodes[i + nameIdx]];
    if (type === 'string' || type === 'concatenated string' || type === 'sliced string') name = '(string)';
    if (type === 'number') name = '(number)';
    if (type === 'code') name = '(code)';
    if (name.length > 60) name = name.slice(0, 60);
    const key = `${type}:${name}`;
    const size = nodes[i + sizeIdx]; total += size;
    const e = by.get(key) ?? { count: 0, size: 0 }; e.count++; e.size += size; by.set(key, e);
  }
  return { by, total };
}
const a = summarize(process.argv[2]); const b = summarize(process.argv[3]);
console.log(`total self size ${(a.total/1e6).toFixed(2)} MB -> ${(b.total/1e6).toFixed(2)} MB`);
const rows = [];
for (const [key, eb] of b.by) { const ea = a.by.get(key) ?? { count: 0, size: 0 }; rows.push([key, eb.size - ea.size, eb.count - ea.count, eb.size, eb.count]); }
for (const [key, ea] of a.by) if (!b.by.has(key)) rows.push([key, -ea.size, -ea.count, 0, 0]);
rows.sort((x, y) => y[1] - x[1]);
for (const r of rows.slice(0, Number(process.argv[4] ?? 30))) console.log(`${(r[1]/1024).toFixed(1).padStart(9)} KB ${String(r[2]).padStart(7)} objs  now ${(r[3]/1024).toFixed(0)} KB/${r[4]}  ${r[0]}`);
