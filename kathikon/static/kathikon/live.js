// The admin overview, live: every few seconds the page is fetched again in the background and
// its overview section (queues, chart, failures) swapped in place; no reload, no framework.
// Paused while the tab is hidden; a failed fetch says so and the next one tries again.
(function () {
  "use strict";
  var page = document.querySelector("[data-live-every]");
  var every = page ? Number(page.getAttribute("data-live-every")) : 0;
  var stamp = document.getElementById("kathikon-live-stamp");
  if (!every || every < 1) {
    return;
  }
  var busy = false;

  function say(text) {
    if (stamp) {
      stamp.textContent = text;
    }
  }

  function update() {
    var box = document.getElementById("kathikon-overview");
    if (busy || document.hidden || !box) {
      return;
    }
    busy = true;
    fetch(window.location.href, {credentials: "same-origin", cache: "no-store",
                                 headers: {"X-Requested-With": "XMLHttpRequest"}})
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html")
          .getElementById("kathikon-overview");
        if (fresh) {
          box.innerHTML = fresh.innerHTML;
          box.setAttribute("data-updated", String(Date.now()));
        }
        say("updated " + new Date().toLocaleTimeString());
      })
      .catch(function (error) {
        say("update failed (" + error.message + "); trying again");
      })
      .then(function () {
        busy = false;
      });
  }

  window.setInterval(update, every * 1000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      update();
    }
  });
})();
