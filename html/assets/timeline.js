// The request timeline: one row per request on the run's clock, drawn on a canvas so
// thousands of rows stay fast. Wheel zooms time around the pointer, shift+wheel zooms rows,
// drag pans, double-click resets, hover names the request.
(function () {
  "use strict";
  var errors = document.getElementById("report-errors");
  window.addEventListener("error", function (e) {
    errors.hidden = false;
    errors.textContent += "script error: " + e.message + "\n";
  });
  var WAIT = "#c8c8c8", PREFILL = "#f0a030", DECODE = "#3b82c4", FAILED = "#d62728";
  var source = document.getElementById("timeline-data");
  var host = document.getElementById("timeline-host");
  if (!source || !host) { document.body.dataset.ready = "1"; return; }
  var runs = JSON.parse(source.textContent);
  var tip = document.getElementById("timeline-tip");

  function niceStep(span, target) {
    var raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }

  function Timeline(run) {
    var rows = run.rows;
    var canvas = document.createElement("canvas");
    var title = document.createElement("h3");
    title.textContent = run.label + " (" + rows.length + " of " + run.total + " requests)";
    host.appendChild(title);
    host.appendChild(canvas);
    var t0 = 0, t1 = 1;
    rows.forEach(function (r) { t0 = Math.min(t0, r[1]); t1 = Math.max(t1, r[5]); });
    var full = { t0: t0, t1: t1, r0: 0, r1: Math.max(rows.length, 1) };
    var view = { t0: full.t0, t1: full.t1, r0: full.r0, r1: full.r1 };
    var AXIS = 22, LEFT = 8;
    function size() {
      var ratio = window.devicePixelRatio || 1;
      canvas.width = Math.max(300, canvas.clientWidth || 1000) * ratio;
      canvas.height = 420 * ratio;
      canvas.style.height = "420px";
      return ratio;
    }
    var ratio = size();
    function x(t) { return LEFT + (t - view.t0) / (view.t1 - view.t0) * (canvas.width - 2 * LEFT); }
    function y(i) { return AXIS * ratio + (i - view.r0) / (view.r1 - view.r0) * (canvas.height - AXIS * ratio); }
    function draw() {
      var g = canvas.getContext("2d");
      g.clearRect(0, 0, canvas.width, canvas.height);
      var h = Math.max(1, (canvas.height - AXIS * ratio) / (view.r1 - view.r0) * 0.8);
      var first = Math.max(0, Math.floor(view.r0)), last = Math.min(rows.length, Math.ceil(view.r1));
      for (var i = first; i < last; i++) {
        var r = rows[i], top = y(i);
        var send = r[2], output = r[3], content = r[4], end = r[5];
        g.fillStyle = WAIT; g.fillRect(x(r[1]), top, Math.max(1, x(send) - x(r[1])), h);
        if (r[6]) {
          g.fillStyle = FAILED; g.fillRect(x(send), top, Math.max(2, x(end) - x(send)), h);
          continue;
        }
        var split = output === null ? end : output;
        g.fillStyle = PREFILL; g.fillRect(x(send), top, Math.max(1, x(split) - x(send)), h);
        if (output !== null) { g.fillStyle = DECODE; g.fillRect(x(output), top, Math.max(1, x(end) - x(output)), h); }
        if (content !== null) { g.fillStyle = "#111"; g.fillRect(x(content), top, Math.max(1, ratio), h); }
      }
      g.fillStyle = "#fff"; g.fillRect(0, 0, canvas.width, AXIS * ratio);
      g.fillStyle = "#333"; g.font = (11 * ratio) + "px sans-serif";
      var step = niceStep(view.t1 - view.t0, 8);
      for (var t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
        var px = x(t);
        g.fillRect(px, AXIS * ratio - 5 * ratio, 1, 5 * ratio);
        var label = step >= 1000 ? (t / 1000).toFixed(step >= 10000 ? 0 : 1) + " s" : t.toFixed(step >= 1 ? 0 : 2) + " ms";
        g.fillText(label, px + 2 * ratio, 12 * ratio);
      }
    }
    canvas.addEventListener("wheel", function (e) {
      e.preventDefault();
      var k = e.deltaY > 0 ? 1.25 : 0.8;
      var rect = canvas.getBoundingClientRect();
      if (e.shiftKey) {
        var at = view.r0 + (e.clientY - rect.top) / rect.height * (view.r1 - view.r0);
        view.r0 = at - (at - view.r0) * k; view.r1 = at + (view.r1 - at) * k;
      } else {
        var ta = view.t0 + (e.clientX - rect.left) / rect.width * (view.t1 - view.t0);
        view.t0 = ta - (ta - view.t0) * k; view.t1 = ta + (view.t1 - ta) * k;
      }
      draw();
    }, { passive: false });
    var drag = null;
    canvas.addEventListener("mousedown", function (e) { drag = { x: e.clientX, y: e.clientY, v: Object.assign({}, view) }; });
    window.addEventListener("mouseup", function () { drag = null; });
    canvas.addEventListener("mousemove", function (e) {
      var rect = canvas.getBoundingClientRect();
      if (drag) {
        var dt = (e.clientX - drag.x) / rect.width * (drag.v.t1 - drag.v.t0);
        var dr = (e.clientY - drag.y) / rect.height * (drag.v.r1 - drag.v.r0);
        view.t0 = drag.v.t0 - dt; view.t1 = drag.v.t1 - dt;
        view.r0 = drag.v.r0 - dr; view.r1 = drag.v.r1 - dr;
        draw();
        return;
      }
      var i = Math.floor(view.r0 + ((e.clientY - rect.top) * ratio - AXIS * ratio) / (canvas.height - AXIS * ratio) * (view.r1 - view.r0));
      var r = rows[i];
      if (!r) { tip.textContent = ""; return; }
      var ms = function (v) { return v === null ? "-" : v.toFixed(3) + " ms"; };
      tip.textContent = run.label + " · request " + r[0] + " · intended " + ms(r[1]) + " · send " + ms(r[2]) +
        " · first output " + ms(r[3]) + " · first content " + ms(r[4]) + " · end " + ms(r[5]) + (r[6] ? " · FAILED" : "");
    });
    canvas.addEventListener("dblclick", function () { view = Object.assign({}, full); draw(); });
    window.addEventListener("resize", function () { ratio = size(); draw(); });
    draw();
  }

  runs.forEach(Timeline);
  host.dataset.rows = String(runs.reduce(function (n, r) { return n + r.rows.length; }, 0));
  document.body.dataset.ready = "1";
})();
