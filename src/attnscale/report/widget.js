/* The report's interactive figure: the softmax weights of one sampled attention row.
 *
 * q and the n keys k_j have iid N(0, 1) components drawn from a seeded PRNG (mulberry32 + Box–Muller),
 * 4096 components each; a given d_k uses the first d_k of them, so moving the slider grows the same
 * vectors instead of drawing new ones. The logits follow attnscale.scales (the parameters come from
 * the Python rules, in the JSON block #widget-config):
 *     z_j = cap( factor(d_k, n) · q̂·k̂_j ),  weights = softmax(z)
 * Below it, the real rows the probe captured (cfg.real, see attnscale.report.widget_rows): a head of
 * dimension D gets, at the slider's d_k, q·k × √(d_k/D) and squared norms × d_k/D (what iid components
 * would give), then the same rule over its own keys.
 * Plain JavaScript, no library, no network.
 */
(function () {
  "use strict";
  var cfgNode = document.getElementById("widget-config");
  var root = document.getElementById("widget");
  if (!cfgNode || !root) return;
  var cfg = JSON.parse(cfgNode.textContent);
  var D_MAX = cfg.d_max;
  var N_MAX = Math.max.apply(null, cfg.n_choices);

  function mulberry32(seed) {
    var a = seed >>> 0;
    return function () {
      a = (a + 0x6D2B79F5) >>> 0;
      var t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function gaussians(count, seed) {
    var uniform = mulberry32(seed), out = new Float64Array(count);
    for (var i = 0; i < count; i += 2) {
      var u1 = uniform(), u2 = uniform();
      if (u1 < 1e-300) u1 = 1e-300;              // log(0) guard; probability 2^-32
      var r = Math.sqrt(-2 * Math.log(u1)), th = 2 * Math.PI * u2;
      out[i] = r * Math.cos(th);
      if (i + 1 < count) out[i + 1] = r * Math.sin(th);
    }
    return out;
  }

  // d_k positions: 2^(i/4) rounded, duplicates removed: 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, ... 4096.
  var dks = [];
  for (var i = 0; i <= 48; i++) {
    var d = Math.round(Math.pow(2, i / 4));
    if (dks[dks.length - 1] !== d) dks.push(d);
  }

  var state = { seed: cfg.seed >>> 0, dk: cfg.d_k, rule: cfg.rule, n: cfg.n, q: null, k: null };

  function sample() {
    var all = gaussians(D_MAX * (N_MAX + 1), state.seed);
    state.q = all.subarray(0, D_MAX);
    state.k = all.subarray(D_MAX);               // key j: components [j*D_MAX, j*D_MAX + d_k)
  }

  function ruleById(id) {
    for (var i = 0; i < cfg.rules.length; i++) if (cfg.rules[i].id === id) return cfg.rules[i];
    return cfg.rules[0];
  }

  function baseFactor(base, dk) {
    if (base === "inverse_sqrt_dk") return 1 / Math.sqrt(dk);
    if (base === "inverse_dk") return 1 / dk;
    return 1;                                   // "unscaled"
  }

  function sumSquares(x, offset, dk) {
    var s = 0;
    for (var i = 0; i < dk; i++) { var v = x[offset + i]; s += v * v; }
    return s;
  }

  function radius(sq, dk, eps, kind) {
    return Math.sqrt((kind === "rms" ? sq / dk : sq) + eps);
  }

  // The rule r on one row: dots[j] = q·k_j, qq = ‖q‖², kk[j] = ‖k_j‖², all of dimension dk.
  function ruleLogits(r, dots, qq, kk, dk) {
    var n = dots.length, z = new Float64Array(n), rq = 1, f;
    if (r.kind === "qknorm") rq = radius(qq, dk, r.eps, r.norm);
    if (r.kind === "qknorm") f = r.norm === "rms" ? r.gain / Math.sqrt(dk) : r.gain;
    else if (r.kind === "logn") f = r.s * Math.log(Math.max(n, 1)) * baseFactor(r.base, dk);
    else f = baseFactor(r.kind === "softcap" ? r.base : r.kind, dk);
    for (var j = 0; j < n; j++) {
      var dot = dots[j];
      if (r.kind === "qknorm") dot /= rq * radius(kk[j], dk, r.eps, r.norm);
      z[j] = f * dot;
      if (r.kind === "softcap") z[j] = r.cap * Math.tanh(z[j] / r.cap);
    }
    return z;
  }

  function logits() {
    var dk = state.dk, n = state.n, q = state.q, k = state.k;
    var dots = new Float64Array(n), kk = new Float64Array(n);
    for (var j = 0; j < n; j++) {
      var off = j * D_MAX, dot = 0;
      for (var i = 0; i < dk; i++) dot += q[i] * k[off + i];
      dots[j] = dot;
      kk[j] = sumSquares(k, off, dk);
    }
    return ruleLogits(ruleById(state.rule), dots, sumSquares(q, 0, dk), kk, dk);
  }

  // A captured row at the slider's d_k: its q·k and norms grown as iid components' would.
  function realLogits(row) {
    var t = state.dk / row.d_k, grow = Math.sqrt(t), n = row.qk.length;
    var dots = new Float64Array(n), kk = new Float64Array(n);
    for (var j = 0; j < n; j++) { dots[j] = row.qk[j] * grow; kk[j] = row.k_norm2[j] * t; }
    return ruleLogits(ruleById(state.rule), dots, row.q_norm2 * t, kk, state.dk);
  }

  function softmax(z) {
    var m = -Infinity, s = 0, p = new Float64Array(z.length);
    for (var j = 0; j < z.length; j++) if (z[j] > m) m = z[j];
    for (j = 0; j < z.length; j++) { p[j] = Math.exp(z[j] - m); s += p[j]; }
    for (j = 0; j < z.length; j++) p[j] /= s;
    return p;
  }

  function entropy(p) {
    var h = 0;
    for (var j = 0; j < p.length; j++) if (p[j] > 0) h -= p[j] * Math.log(p[j]);
    return h;
  }

  var SVG = "http://www.w3.org/2000/svg";     // the SVG namespace name, not a request
  var W = 640, H = 240, PAD_L = 34, PAD_R = 8, PAD_T = 12, PAD_B = 26;
  var svg = root.querySelector("svg.bars");

  function fitWidth() {
    // Draw in CSS pixels of the box (clamped), so labels keep their size on a phone.
    var w = svg.getBoundingClientRect().width;
    W = Math.round(Math.min(640, Math.max(300, w || 640)));
  }

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(x, digits) {
    if (!isFinite(x)) return String(x);
    if (x !== 0 && (Math.abs(x) < 1e-3 || Math.abs(x) >= 1e5)) return x.toExponential(2);
    return x.toFixed(digits);
  }

  function draw(p) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    var plotW = W - PAD_L - PAD_R, plotH = H - PAD_T - PAD_B, n = p.length;
    [0, 0.25, 0.5, 0.75, 1].forEach(function (t) {
      var y = PAD_T + plotH * (1 - t);
      svg.appendChild(el("line", { x1: PAD_L, x2: W - PAD_R, y1: y, y2: y, stroke: "#e4e7ee", "stroke-width": 1 }));
      svg.appendChild(el("text", { x: PAD_L - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#8a93a3" },
                         t === 0 || t === 1 ? String(t) : t.toFixed(2)));
    });
    var slot = plotW / n, bw = Math.max(1, slot * 0.78), jmax = 0;
    for (var j = 1; j < n; j++) if (p[j] > p[jmax]) jmax = j;
    for (j = 0; j < n; j++) {
      var h = Math.max(p[j] * plotH, p[j] > 0 ? 0.5 : 0);
      var bar = el("rect", { x: PAD_L + j * slot + (slot - bw) / 2, y: PAD_T + plotH - h, width: bw, height: h,
                             rx: Math.min(3, bw / 4), fill: j === jmax ? "#3559c7" : "#9fb3ea",
                             "class": "bar", "data-weight": p[j].toPrecision(17) });
      bar.appendChild(el("title", {}, cfg.labels.key + " " + (j + 1) + ": " + fmt(p[j], 4)));
      svg.appendChild(bar);
    }
    var yu = PAD_T + plotH * (1 - 1 / n);
    svg.appendChild(el("line", { x1: PAD_L, x2: W - PAD_R, y1: yu, y2: yu, stroke: "#b3261e", "stroke-width": 1.2,
                                 "stroke-dasharray": "5 4" }));
    svg.appendChild(el("text", { x: W - PAD_R, y: yu - 5, "text-anchor": "end", "font-size": 11, fill: "#b3261e" },
                       cfg.labels.uniform + " 1/n"));
    svg.appendChild(el("text", { x: PAD_L + plotW / 2, y: H - 6, "text-anchor": "middle", "font-size": 12,
                                 fill: "#5d6677" }, cfg.labels.keys_axis + " (n = " + n + ")"));
  }

  // A real row's bars: no axes (its figures are beside it), the largest dark, each key's token in its title.
  function drawReal(node, p, keys) {
    while (node.firstChild) node.removeChild(node.firstChild);
    var n = p.length, slot = 320 / n, bw = Math.max(1, slot * 0.78), jmax = 0;
    for (var j = 1; j < n; j++) if (p[j] > p[jmax]) jmax = j;
    for (j = 0; j < n; j++) {
      var h = Math.max(p[j] * 46, p[j] > 0 ? 0.5 : 0);
      var bar = el("rect", { x: j * slot + (slot - bw) / 2, y: 48 - h, width: bw, height: h,
                             fill: j === jmax ? "#3559c7" : "#9fb3ea", "class": "real-bar",
                             "data-weight": p[j].toPrecision(17) });
      bar.appendChild(el("title", {}, cfg.labels.key + " " + (j + 1) + " “" + keys[j] + "”: " + fmt(p[j], 4)));
      node.appendChild(bar);
    }
  }

  function updateReal() {
    state.real = [];
    for (var i = 0; i < cfg.real.length; i++) {
      var row = cfg.real[i], z = realLogits(row), p = softmax(z), h = entropy(p), m = 0;
      for (var j = 0; j < p.length; j++) if (p[j] > m) m = p[j];
      root.querySelector("#w-entropy-" + i).textContent = fmt(h, 3) + " / " + fmt(Math.log(p.length), 2);
      root.querySelector("#w-maxw-" + i).textContent = fmt(m, 3);
      var tag = state.rule === "inverse_sqrt_dk" && row.own ? "own" : state.dk === row.d_k ? "exact" : "grown";
      root.querySelector("#w-tag-" + i).textContent = "· " + cfg.labels[tag];
      drawReal(root.querySelector("#w-real-" + i), p, row.keys);
      state.real.push({ logits: z, weights: p, entropy: h, max_weight: m, tag: tag });
    }
  }

  var dkInput = root.querySelector("#w-dk"), dkOut = root.querySelector("#w-dk-out");
  var ruleInput = root.querySelector("#w-rule"), nInput = root.querySelector("#w-n");
  var out = {
    entropy: root.querySelector("#w-entropy"), maxw: root.querySelector("#w-maxw"),
    spread: root.querySelector("#w-spread"), support: root.querySelector("#w-support"),
    formula: root.querySelector("#w-formula")
  };

  function update() {
    state.dk = dks[+dkInput.value];
    state.rule = ruleInput.value;
    state.n = +nInput.value;
    var z = logits(), p = softmax(z), h = entropy(p), m = 0, mean = 0, varz = 0;
    for (var j = 0; j < p.length; j++) { if (p[j] > m) m = p[j]; mean += z[j] / z.length; }
    for (j = 0; j < z.length; j++) varz += (z[j] - mean) * (z[j] - mean) / z.length;
    dkOut.textContent = String(state.dk);
    out.entropy.textContent = fmt(h, 3) + " / " + fmt(Math.log(state.n), 2);
    out.maxw.textContent = fmt(m, 3);
    out.spread.textContent = fmt(Math.sqrt(varz), 2);
    out.support.textContent = fmt(Math.exp(h), 1);
    out.formula.textContent = cfg.labels.formula + ": " + ruleById(state.rule).formula;
    draw(p);
    state.weights = p;
    state.logits = z;
    updateReal();
  }

  dkInput.max = String(dks.length - 1);
  dkInput.value = String(Math.max(0, dks.indexOf(state.dk)));
  root.querySelector("#w-resample").addEventListener("click", function () {
    state.seed = (state.seed + 0x9E3779B9) >>> 0;
    sample();
    update();
  });
  [dkInput, ruleInput, nInput].forEach(function (node) {
    node.addEventListener("input", update);
    node.addEventListener("change", update);
  });
  window.addEventListener("resize", function () {
    var old = W;
    fitWidth();
    if (W !== old) update();
  });
  fitWidth();
  sample();
  update();
  // For tests and the curious: the current state (the real rows' logits, weights and figures in
  // state.real), and the logits and weights it gives.
  window.attnscaleWidget = { state: state, dks: dks, logits: logits, softmax: softmax };
})();
