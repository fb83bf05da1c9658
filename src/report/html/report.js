(function () {
  // The report's script (the live page adds live.js). The page works without it (rows fold as
  // details elements, a chart's values show on hover through its SVG titles); it adds what a page
  // alone cannot do, and says how it went on the root element, where tests and people can read it.
  var root = document.documentElement;

  // Every script error, one per line in data-memseal-errors: a page that broke says so.
  function report(message) {
    var before = root.dataset.memsealErrors;
    root.dataset.memsealErrors = (before ? before + "\n" : "") + message;
  }
  window.onerror = function (message, source, line) {
    report(String(message) + " (line " + line + ")");
  };
  window.addEventListener("unhandledrejection", function (event) {
    report("unhandled rejection: " + String(event.reason));
  });

  // A printed report shows every folded row.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (details) {
      details.open = true;
    });
  });

  // data-memseal-ready="1": the page and its charts have loaded.
  window.addEventListener("load", function () {
    root.dataset.memsealReady = "1";
  });
})();
