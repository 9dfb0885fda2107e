/* The page's reading path: each chapter's body is a closed <details> (page.py) that a reader opens.
 * A link to a chapter, or to anything inside one (the contents, a headline card, a URL's #fragment),
 * opens it first, so that the browser scrolls to something it shows; the contents' button opens or
 * closes every chapter, and printing opens them all. Plain JavaScript, no library, no network.
 */
(function () {
  "use strict";
  function chapters() {
    return document.querySelectorAll("details.chapter-body");
  }

  function reveal(hash) {
    if (!hash || hash.charAt(0) !== "#" || hash.length < 2) return;
    var target = document.getElementById(decodeURIComponent(hash.slice(1)));
    if (!target) return;
    var own = target.querySelector(":scope > details.chapter-body");
    if (own) own.open = true;
    for (var node = target.parentElement; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") node.open = true;
    }
  }

  function setAll(open) {
    chapters().forEach(function (d) { d.open = open; });
  }

  // Capture: the chapter opens before the browser scrolls to it.
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest('a[href^="#"]') : null;
    if (link) reveal(link.getAttribute("href"));
  }, true);
  window.addEventListener("hashchange", function () { reveal(location.hash); });
  window.addEventListener("beforeprint", function () { setAll(true); });
  reveal(location.hash);
  if (location.hash) {
    var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target) target.scrollIntoView();
  }

  var button = document.getElementById("open-all");
  if (!button) return;
  button.hidden = false; // without this script the button could do nothing: it starts hidden
  function label() {
    var anyClosed = Array.prototype.some.call(chapters(), function (d) { return !d.open; });
    button.textContent = anyClosed ? button.dataset.open : button.dataset.close;
  }
  button.addEventListener("click", function () {
    setAll(button.textContent === button.dataset.open);
    label();
  });
  document.addEventListener("toggle", label, true);
  label();
})();
