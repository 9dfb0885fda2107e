// attnscale watch --html: draws each figure's layer × head heatmap over the steps from the page's
// own JSON (#data), marks the alerts on it, and the loss on the same step axis below it. No library,
// nothing fetched.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  const words = data.words;
  const main = document.getElementById("figures");
  const tip = document.getElementById("tip");
  const cols = data.steps.length;
  const rows = data.rows.length;
  // Cell sizes in canvas pixels: a heatmap about 960 wide, rows 2 to 12 px tall.
  const CW = Math.max(1, Math.floor(960 / cols));
  const RH = Math.max(2, Math.min(12, Math.floor(480 / rows)));
  // Viridis at five stops (perceptually uniform, readable in grey), interpolated linearly.
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

  function colour(t) {
    const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x));
    const f = x - i;
    return STOPS[i].map((c, k) => Math.round(c + f * (STOPS[i + 1][k] - c)));
  }

  // The figure's colour scale: min..max of its finite values (of their log where log and positive).
  function scaleOf(values, log) {
    let lo = Infinity, hi = -Infinity;
    for (const row of values) for (const v of row) {
      if (v === null || (log && v <= 0)) continue;
      const u = log ? Math.log(v) : v;
      if (u < lo) lo = u;
      if (u > hi) hi = u;
    }
    if (!(hi >= lo)) { lo = 0; hi = 1; }
    const span = hi > lo ? hi - lo : 1;
    const t = (v) => ((log ? Math.log(v) : v) - lo) / span;
    return { t, lo: log ? Math.exp(lo) : lo, hi: log ? Math.exp(hi) : hi };
  }

  function fmt(v) {
    if (v === null || v === undefined) return "–";
    const text = Number(v).toPrecision(4);
    // Trailing zeros of a fraction only ("2.500" → "2.5"; "4520" and "1.000e+5" keep theirs).
    return text.includes("e") || !text.includes(".") ? text : text.replace(/\.?0+$/, "");
  }

  function drawHeatmap(canvas, fig, scale) {
    const img = new ImageData(cols, rows);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
      const v = fig.values[r][c];
      const at = 4 * (r * cols + c);
      const rgb = v === null ? [235, 235, 235] : (fig.log && v <= 0 ? colour(0) : colour(scale.t(v)));
      img.data[at] = rgb[0]; img.data[at + 1] = rgb[1]; img.data[at + 2] = rgb[2]; img.data[at + 3] = 255;
    }
    const small = document.createElement("canvas");
    small.width = cols; small.height = rows;
    small.getContext("2d").putImageData(img, 0, 0);
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(small, 0, 0, cols * CW, rows * RH);
    // A thin line between layers: each layer's heads are consecutive rows.
    ctx.fillStyle = "rgba(255,255,255,0.8)";
    for (let r = 1; r < rows; r++) if (data.layers[r] !== data.layers[r - 1]) ctx.fillRect(0, r * RH, cols * CW, 1);
    // The alerts: a red ring around the cell, at least 8 px across so that one cell can be seen.
    ctx.strokeStyle = "#e4002b"; ctx.lineWidth = 2;
    for (const a of fig.alerts) {
      const w = Math.max(8, CW), h = Math.max(8, RH);
      ctx.strokeRect(a.col * CW + CW / 2 - w / 2, a.row * RH + RH / 2 - h / 2, w, h);
    }
    canvas.dataset.drawn = String(fig.alerts.length);
  }

  function drawLoss(canvas) {
    const ctx = canvas.getContext("2d");
    const ys = data.loss.filter((v) => v !== null);
    const lo = Math.min(...ys), hi = Math.max(...ys), span = hi > lo ? hi - lo : 1;
    ctx.strokeStyle = "#333"; ctx.lineWidth = 1.5; ctx.beginPath();
    let started = false;
    data.loss.forEach((v, c) => {
      if (v === null) { started = false; return; }
      const x = c * CW + CW / 2, y = 4 + (canvas.height - 8) * (1 - (v - lo) / span);
      if (started) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      started = true;
    });
    ctx.stroke();
    ctx.fillStyle = "#555"; ctx.font = "11px system-ui, sans-serif";
    ctx.fillText(`${words.loss} ${fmt(lo)} … ${fmt(hi)}`, canvas.width - 160, 12);
    canvas.title = words.loss + ": " + fmt(lo) + " … " + fmt(hi);
    canvas.dataset.drawn = "1";
  }

  function legend(scale, log) {
    const bar = document.createElement("div");
    bar.className = "legend";
    const stops = STOPS.map((c, i) => `rgb(${c.join(",")}) ${(100 * i) / (STOPS.length - 1)}%`).join(",");
    bar.innerHTML = `<span>${fmt(scale.lo)}</span><i style="background:linear-gradient(90deg,${stops})"></i>` +
      `<span>${fmt(scale.hi)}</span>${log ? " <em>log</em>" : ""}`;
    return bar;
  }

  function hover(canvas, fig) {
    canvas.addEventListener("mousemove", (e) => {
      const box = canvas.getBoundingClientRect();
      const c = Math.floor(((e.clientX - box.left) * canvas.width) / box.width / CW);
      const r = Math.floor(((e.clientY - box.top) * canvas.height) / box.height / RH);
      if (c < 0 || c >= cols || r < 0 || r >= rows) { tip.hidden = true; return; }
      tip.textContent = `${words.step} ${data.steps[c]} · ${data.rows[r]}: ${fmt(fig.values[r][c])}`;
      tip.style.left = e.pageX + 12 + "px"; tip.style.top = e.pageY + 12 + "px"; tip.hidden = false;
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  }

  for (const [name, fig] of Object.entries(data.figures)) {
    const section = document.createElement("section");
    section.id = name;
    const h2 = document.createElement("h2");
    h2.textContent = fig.title;
    section.appendChild(h2);
    if (!fig.watched) {
      const note = document.createElement("p"); note.className = "note"; note.textContent = words.fixed_only;
      section.appendChild(note);
    }
    const scale = scaleOf(fig.values, fig.log);
    const canvas = document.createElement("canvas");
    canvas.className = "heatmap"; canvas.width = cols * CW; canvas.height = rows * RH;
    section.appendChild(canvas);
    drawHeatmap(canvas, fig, scale);
    hover(canvas, fig);
    if (data.loss) {
      const loss = document.createElement("canvas");
      loss.className = "loss"; loss.width = cols * CW; loss.height = 60;
      section.appendChild(loss);
      drawLoss(loss);
    }
    section.appendChild(legend(scale, fig.log));
    const axis = document.createElement("p");
    axis.className = "axis";
    axis.textContent = `${words.step} ${data.steps[0]} … ${data.steps[cols - 1]}` + (data.loss ? "" : ` · ${words.no_loss}`);
    section.appendChild(axis);
    if (fig.alerts.length) {
      const box = document.createElement("details");
      box.innerHTML = `<summary>${words.alerts_here} (${fig.alerts.length})</summary>`;
      const list = document.createElement("ol");
      for (const a of fig.alerts) { const li = document.createElement("li"); li.textContent = a.text; list.appendChild(li); }
      box.appendChild(list);
      section.appendChild(box);
    }
    main.appendChild(section);
  }
})();
