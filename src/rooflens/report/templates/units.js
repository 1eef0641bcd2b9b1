// How the pages write quantities: the same conventions as rooflens/units.py (tests/test_units.py runs both
// on the same values in Chromium): the unit is chosen after rounding to 3 significant digits, bytes are
// decimal (kB, MB, GB), rates and counts take SI prefixes, no figure is written with an exponent.
function sig3(v, d) { d = d || 3; if (v === 0) return "0"; const dec = Math.max(0, d - 1 - Math.floor(Math.log10(Math.abs(v)))); let s = v.toFixed(dec); if (s.indexOf(".") >= 0) s = s.replace(/0+$/, "").replace(/\.$/, ""); return s; }
function roundSig(v, d) { if (v === 0 || !isFinite(v)) return v; return Number(v.toPrecision(d || 3)); }
function missing(v) { return v === null || v === undefined || (typeof v === "number" && isNaN(v)); }
function t(s) {
  if (missing(s)) return "—"; if (!isFinite(s)) return s > 0 ? "∞" : "-∞";
  const r = roundSig(s, 3); if (r === 0) return "0 s";
  const sign = r < 0 ? "-" : "", a = Math.abs(r);
  if (a >= 1000) { const [u, z] = a >= 2 * 86400 ? ["d", 86400] : a >= 2 * 3600 ? ["h", 3600] : ["min", 60]; const v = roundSig(a / z, 3); return sign + (v >= 1000 ? Math.round(v).toLocaleString("en-US") : sig3(v)) + " " + u; }
  for (const [u, z] of [["s", 1], ["ms", 1e-3], ["µs", 1e-6], ["ns", 1e-9], ["ps", 1e-12]]) if (a >= z * (1 - 1e-12)) return sign + sig3(roundSig(a / z, 3)) + " " + u;
  return sign + sig3(a / 1e-12) + " ps";
}
function si(v, u) {
  u = u || ""; if (missing(v)) return "—"; if (!isFinite(v)) return ("∞ " + u).trim();
  const r = roundSig(v, 3), sign = r < 0 ? "-" : "", a = Math.abs(r);
  for (const [p, z] of [["E", 1e18], ["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]]) if (a >= z) { const x = roundSig(a / z, 3); return sign + (x >= 1000 ? Math.round(x).toLocaleString("en-US") : sig3(x)) + " " + p + u; }
  return (sign + sig3(a) + " " + u).trim();
}
function bytes(n) {
  if (missing(n)) return "—"; if (!isFinite(n)) return "∞ B";
  const sign = n < 0 ? "-" : "", a = Math.abs(roundSig(n, 3));
  for (const [u, z] of [["PB", 1e15], ["TB", 1e12], ["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) if (a >= z) { const x = roundSig(a / z, 3); return sign + (u === "PB" && x >= 1000 ? Math.round(x).toLocaleString("en-US") : sig3(x)) + " " + u; }
  return sign + Math.round(Math.abs(n)).toLocaleString("en-US") + " B";
}
function pct(x) { if (missing(x)) return "—"; const v = 100 * x; if (v === 0) return "0%"; if (Math.abs(v) >= 0.1) return v.toFixed(1) + "%"; if (Math.abs(v) < 0.01) return v > 0 ? "<0.01%" : ">-0.01%"; return sig3(roundSig(v, 2), 2) + "%"; }
function ratio(x) { if (missing(x)) return "—"; if (!isFinite(x)) return "∞×"; if (Math.abs(x) >= 1000) return Math.round(x).toLocaleString("en-US") + "×"; return sig3(roundSig(x, 3)) + "×"; }
