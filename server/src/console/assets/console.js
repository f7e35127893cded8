// The operator console's only script. Every page works without it; it adds
// three conveniences: a form is submitted once (a second click while the
// first is on its way does nothing), a running job's page refreshes itself,
// and a "select all" box for the bulk form.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.dataset.submitted === "yes") {
    event.preventDefault();
    return;
  }
  form.dataset.submitted = "yes";
  for (const button of form.querySelectorAll("button[type=submit]")) {
    button.setAttribute("aria-disabled", "true");
  }
});

const refresh = document.querySelector("[data-refresh]");
if (refresh) {
  setTimeout(() => window.location.reload(), Number(refresh.dataset.refresh) || 1000);
}

const table = document.querySelector("table#operations");
const boxes = table ? table.querySelectorAll("input[name=key]") : [];
if (boxes.length > 0) {
  const all = document.createElement("input");
  all.type = "checkbox";
  all.setAttribute("aria-label", "Select every operation on this page");
  all.addEventListener("change", () => {
    for (const box of boxes) box.checked = all.checked;
  });
  const corner = table.querySelector("thead th");
  if (corner) corner.append(all);
}
