"use strict";
(function () {
  var data = JSON.parse(document.getElementById("flame-data").textContent);
  var names = data.names, nameOf = data.name, depth = data.depth;
  var value = Float64Array.from(data.self), base = data.diff ? Float64Array.from(data.baseSelf) : null;
  var unit = data.unit ? " " + data.unit : "";
  var n = depth.length;
  var ROW = 16, MIN_PX = 0.5, LABEL_PX = 24;

  var chart = document.getElementById("chart");
  var tip = document.getElementById("tip");
  var searchBox = document.getElementById("search");
  var resetButton = document.getElementById("reset");
  var matchedOut = document.getElementById("matched");

  // The nodes are in preorder: a node's parent is the last node before it one
  // level up, its subtree runs from it up to end[i], and its children are
  // found by jumping from one sibling's end to the next.
  var parent = new Int32Array(n), end = new Int32Array(n), lastAt = [], maxDepth = 0, i;
  for (i = 0; i < n; i++) {
    lastAt[depth[i]] = i;
    parent[i] = depth[i] > 0 ? lastAt[depth[i] - 1] : -1;
    end[i] = i + 1;
    if (depth[i] > maxDepth) maxDepth = depth[i];
  }
  // Children come after their parent, so going backwards gathers each
  // subtree into its parent: own weights become totals.
  for (i = n - 1; i > 0; i--) {
    var p = parent[i];
    value[p] += value[i];
    if (base) base[p] += base[i];
    if (end[i] > end[p]) end[p] = end[i];
  }

  var zoom = 0;
  var matched = null; // per node: 1 if the search matches its name

  function rgb(r, g, b) {
    return "rgb(" + Math.round(r) + "," + Math.round(g) + "," + Math.round(b) + ")";
  }

  // FNV-1a, so a function keeps its colour across pages and reloads.
  function hash(s) {
    var h = 2166136261;
    for (var k = 0; k < s.length; k++) {
      h ^= s.charCodeAt(k);
      h = Math.imul(h, 16777619);
    }
    return h >>> 0;
  }

  function plainColour(name) {
    var h = hash(name), a = (h & 255) / 255, b = ((h >>> 8) & 255) / 255, c = ((h >>> 16) & 255) / 255;
    if (name.charAt(0) === "[") return rgb(160 + 30 * a, 160 + 30 * a, 200 + 40 * b); // synthetic: [idle], [user], [unknown]
    if (name.indexOf("/") >= 0) return rgb(60 + 60 * a, 180 + 50 * b, 160 + 60 * c); // user space: a path or library
    return rgb(205 + 50 * c, 230 * a, 55 * b); // kernel
  }

  var colourCache = new Array(names.length);
  function colourOf(i) {
    if (base) {
      var d = value[i] - base[i];
      if (d === 0) return rgb(225, 225, 225);
      var s = base[i] > 0 ? Math.min(1, Math.abs(d) / base[i]) : 1;
      var f = 225 - 130 * s;
      return d > 0 ? rgb(255, f, f) : rgb(f, f, 255);
    }
    var k = nameOf[i];
    if (colourCache[k] === undefined) colourCache[k] = plainColour(names[k]);
    return colourCache[k];
  }

  function fmtValue(v) {
    return v.toLocaleString("en-US", Math.abs(v) >= 100 ? { maximumFractionDigits: 0 } : { maximumSignificantDigits: 3 });
  }

  function fmtPct(f) {
    var p = f * 100;
    return p.toLocaleString("en-US", Math.abs(p) >= 1 ? { maximumFractionDigits: 1 } : { maximumSignificantDigits: 2 }) + " %";
  }

  function share(v, total) {
    return total > 0 ? " (" + fmtPct(v / total) + " of total)" : "";
  }

  function describe(i) {
    var lines = [names[nameOf[i]]];
    if (!base) {
      lines.push(fmtValue(value[i]) + unit + share(value[i], value[0]));
      return lines.join("\n");
    }
    var d = value[i] - base[i], sign = d > 0 ? "+" : d < 0 ? "-" : "";
    var rel = base[i] > 0 ? " (" + sign + fmtPct(Math.abs(d) / base[i]) + ")" : d > 0 ? " (new)" : "";
    lines.push("this:   " + fmtValue(value[i]) + unit + share(value[i], value[0]));
    lines.push("base:   " + fmtValue(base[i]) + unit + share(base[i], base[0]));
    lines.push("change: " + sign + fmtValue(Math.abs(d)) + unit + rel);
    return lines.join("\n");
  }

  function addFrame(frag, i, x, w, extra) {
    var el = document.createElement("div");
    el.className = (matched && matched[i] ? "frame hl" : "frame") + extra;
    // A one-pixel gap keeps neighbours apart, where there is room for it.
    el.style.cssText = "left:" + x.toFixed(2) + "px;top:" + (maxDepth - depth[i]) * ROW + "px;width:" +
      (w >= 3 ? w - 1 : w).toFixed(2) + "px;background-color:" + colourOf(i);
    var name = names[nameOf[i]];
    el.setAttribute("data-id", i);
    el.setAttribute("data-name", name);
    el.setAttribute("data-value", value[i]);
    if (base) el.setAttribute("data-base", base[i]);
    if (w >= LABEL_PX) el.textContent = name;
    frag.appendChild(el);
  }

  // draw lays out node i and its descendants from x, classic style: root at
  // the bottom, children left to right from the parent's left edge. A frame
  // too narrow to see has descendants narrower still, so its subtree is skipped.
  function draw(frag, i, x, scale) {
    addFrame(frag, i, x, value[i] * scale, "");
    for (var c = i + 1; c < end[i]; c = end[c]) {
      var w = value[c] * scale;
      if (w >= MIN_PX) draw(frag, c, x, scale);
      x += w;
    }
  }

  function render() {
    var width = chart.clientWidth;
    var frag = document.createDocumentFragment();
    for (var a = parent[zoom]; a >= 0; a = parent[a]) addFrame(frag, a, 0, width, " anc");
    draw(frag, zoom, 0, width / value[zoom]);
    chart.textContent = "";
    chart.appendChild(frag);
    resetButton.disabled = zoom === 0;
    hideTip();
    document.body.dataset.rendered = "1";
  }

  function compile(term) {
    if (!term) return null;
    try {
      return new RegExp(term, "i");
    } catch (err) {
      // Not a valid regex: take it as a plain substring.
      return new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
    }
  }

  function search(term) {
    var re = compile(term);
    matched = null;
    matchedOut.textContent = "";
    if (re) {
      var hit = new Uint8Array(names.length);
      for (var k = 0; k < names.length; k++) hit[k] = re.test(names[k]) ? 1 : 0;
      // The root is not a frame of the profile, so it never matches. A match
      // inside a matched subtree is already counted by the outer one.
      matched = new Uint8Array(n);
      var covered = new Uint8Array(n), sum = 0;
      for (var j = 1; j < n; j++) {
        matched[j] = hit[nameOf[j]];
        if (matched[j] && !covered[parent[j]]) sum += value[j];
        covered[j] = covered[parent[j]] | matched[j];
      }
      matchedOut.textContent = "matched: " + fmtPct(sum / value[0]) + " of total";
    }
    render();
  }

  function searchFromHash() {
    var m = /(?:^#|&)search=([^&]*)/.exec(location.hash), term = "";
    if (m) {
      try {
        term = decodeURIComponent(m[1]);
      } catch (err) {
        term = m[1];
      }
    }
    searchBox.value = term;
    search(term);
  }

  var tipFor = -1;
  function hideTip() {
    tip.style.display = "none";
    tipFor = -1;
  }

  chart.addEventListener("mousemove", function (e) {
    var el = e.target.closest(".frame");
    if (!el) {
      hideTip();
      return;
    }
    var id = +el.getAttribute("data-id");
    if (id !== tipFor) {
      tip.textContent = describe(id);
      tipFor = id;
    }
    tip.style.display = "block";
    var x = e.clientX + 12, y = e.clientY + 12;
    if (x + tip.offsetWidth > window.innerWidth) x = Math.max(0, e.clientX - 12 - tip.offsetWidth);
    if (y + tip.offsetHeight > window.innerHeight) y = Math.max(0, e.clientY - 12 - tip.offsetHeight);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  });
  chart.addEventListener("mouseleave", hideTip);

  // Clicking the root zooms to it, which is the reset.
  chart.addEventListener("click", function (e) {
    var el = e.target.closest(".frame");
    if (!el) return;
    zoom = +el.getAttribute("data-id");
    render();
  });

  resetButton.addEventListener("click", function () {
    zoom = 0;
    render();
  });

  searchBox.addEventListener("input", function () {
    var term = searchBox.value;
    // Keep the URL a link to this search; browsers that refuse (some file:
    // URLs) only lose that.
    try {
      history.replaceState(null, "", term ? "#search=" + encodeURIComponent(term) : location.pathname + location.search);
    } catch (err) {}
    search(term);
  });
  window.addEventListener("hashchange", searchFromHash);

  var resizePending = false;
  window.addEventListener("resize", function () {
    if (resizePending) return;
    resizePending = true;
    requestAnimationFrame(function () {
      resizePending = false;
      render();
    });
  });

  chart.style.height = (maxDepth + 1) * ROW + "px";
  searchFromHash();
})();
