(function () {
  var form = document.getElementById("search"), q = document.getElementById("q"), out = document.getElementById("matches");
  function unmark() {
    document.querySelectorAll("section.turn mark").forEach(function (m) {
      var parent = m.parentNode; parent.replaceChild(document.createTextNode(m.textContent), m); parent.normalize();
    });
    document.querySelectorAll("details[data-opened]").forEach(function (d) { d.open = false; d.removeAttribute("data-opened"); });
  }
  function mark(section, text) {
    var walker = document.createTreeWalker(section, NodeFilter.SHOW_TEXT), nodes = [], node;
    while ((node = walker.nextNode())) { if (node.nodeValue.toLowerCase().indexOf(text) >= 0) nodes.push(node); }
    nodes.forEach(function (n) {
      var value = n.nodeValue, lower = value.toLowerCase(), at = 0, i, frag = document.createDocumentFragment();
      while ((i = lower.indexOf(text, at)) >= 0) {
        frag.appendChild(document.createTextNode(value.slice(at, i)));
        var m = document.createElement("mark"); m.textContent = value.slice(i, i + text.length); frag.appendChild(m);
        at = i + text.length;
      }
      frag.appendChild(document.createTextNode(value.slice(at)));
      for (var d = n.parentNode.closest("details"); d; d = d.parentElement.closest("details")) {
        if (!d.open) { d.open = true; d.setAttribute("data-opened", ""); }
      }
      n.parentNode.replaceChild(frag, n);
    });
  }
  function apply() {
    var text = q.value.toLowerCase(), shown = 0, all = document.querySelectorAll("section.turn");
    unmark();
    all.forEach(function (s) {
      var hit = !text || s.dataset.text.indexOf(text) >= 0; s.classList.toggle("hidden", !hit);
      if (hit) { shown++; if (text) mark(s, text); }
    });
    out.textContent = text ? shown + " of " + all.length + " turns match" : "";
  }
  form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
  q.addEventListener("input", apply);
})();
