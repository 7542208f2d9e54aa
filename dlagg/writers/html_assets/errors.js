// Runs first: records every script error and failed promise, so that the page (and its tests) can
// tell a page that rendered from one that did not.
window.dlagg = {errors: [], charts: {}, tables: {}, views: {}, ready: false};
window.addEventListener("error", function (event) {
  window.dlagg.errors.push(String(event.message || event.type) + (event.filename ? " at " + event.filename + ":" + event.lineno : ""));
});
window.addEventListener("unhandledrejection", function (event) {
  window.dlagg.errors.push("unhandled rejection: " + String(event.reason && (event.reason.stack || event.reason)));
});
