"""The console's stylesheet and script, served from /console/static/ (kept here, in Python, so
they ship with the package without package data). No inline style or script anywhere: the
Content-Security-Policy allows only these two files. The script only enhances: every page works
without it."""

CSS = """
:root { --ink: #1a1a1a; --muted: #4a4f57; --line: #c9ced6; --bg: #ffffff; --soft: #f3f5f8;
  --link: #0b4fb3; --you: #17603a; --agent: #5a3d99; --danger: #a8231b; --focus: #ffbf47; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; justify-content: space-between;
  padding: .6rem 1rem; border-bottom: 1px solid var(--line); background: var(--soft); }
header nav { display: flex; flex-wrap: wrap; gap: .25rem .9rem; align-items: center; }
.brand { font-weight: 700; letter-spacing: .02em; }
main { max-width: 56rem; margin: 0 auto; padding: 1rem; }
h1 { font-size: 1.5rem; line-height: 1.25; margin: .5rem 0 1rem; overflow-wrap: anywhere; }
h2 { font-size: 1.15rem; margin: 1.75rem 0 .5rem; }
a { color: var(--link); }
a:focus, button:focus, input:focus, textarea:focus { outline: 3px solid var(--focus); outline-offset: 2px; }
.skip { position: absolute; left: -999px; }
.skip:focus { left: 1rem; top: .5rem; background: var(--bg); padding: .25rem .5rem; z-index: 1; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
ul.memories, ul.watching { list-style: none; padding: 0; margin: 0; }
.memory, ul.watching li { border: 1px solid var(--line); border-radius: 6px; padding: .6rem .8rem; margin: .5rem 0; }
.memory.big .text { font-size: 1.15rem; }
.text { margin: .2rem 0; overflow-wrap: anywhere; white-space: pre-wrap; }
.meta, .when, .empty { color: var(--muted); font-size: .9rem; margin: 0; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: 999px; font-size: .8rem; font-weight: 600;
  color: #fff; background: var(--muted); }
.badge.you { background: var(--you); }
.badge.agent { background: var(--agent); }
.kind { font-weight: 600; color: var(--ink); }
.budget { background: var(--soft); border-radius: 6px; padding: .5rem .8rem; }
.notice { background: #e7f3ec; border-left: 4px solid var(--you); padding: .5rem .8rem; }
.error { color: var(--danger); }
p.error { background: #fbeaea; border-left: 4px solid var(--danger); padding: .5rem .8rem; }
form.stack { display: grid; gap: .35rem; max-width: 36rem; margin-top: .75rem; }
form.row { display: flex; flex-wrap: wrap; gap: .4rem; align-items: center; }
form.inline { display: inline; }
label { font-weight: 600; }
input, textarea { font: inherit; padding: .4rem .5rem; border: 1px solid var(--muted); border-radius: 4px;
  max-width: 100%; color: var(--ink); background: var(--bg); }
textarea { width: 100%; }
button { font: inherit; padding: .4rem .9rem; border-radius: 4px; border: 1px solid var(--link);
  background: var(--link); color: #fff; cursor: pointer; justify-self: start; }
button.link { background: none; border: 0; color: var(--link); text-decoration: underline; padding: 0; }
.danger button, button.danger { background: var(--danger); border-color: var(--danger); }
a.danger { color: var(--danger); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: .95rem; }
caption { text-align: left; color: var(--muted); font-size: .9rem; }
th, td { text-align: left; vertical-align: top; padding: .35rem .5rem; border-bottom: 1px solid var(--line);
  overflow-wrap: break-word; }
@media (max-width: 40rem) {  /* a phone: each row a card, each cell labelled by its column */
  table, caption, tbody, tr, td { display: block; }
  thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  tr { border: 1px solid var(--line); border-radius: 6px; margin: .5rem 0; padding: .25rem 0; }
  td { border: 0; padding: .15rem .6rem; }
  td::before { content: attr(data-label); display: block; color: var(--muted); font-size: .8rem; }
}
q { quotes: "\\201C" "\\201D"; }
dl.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(10rem, 1fr)); gap: .5rem; margin: 0; }
.tile { background: var(--soft); border-radius: 6px; padding: .5rem .8rem; }
.tile dt { color: var(--muted); font-size: .85rem; }
.tile dd { margin: 0; font-size: 1.4rem; font-weight: 700; }
"""

JS = """// memwright console: progressive enhancement only; every page works without this file.
(function () {
  // A sign-in link carries the token in its #fragment (never sent to a server or kept in logs):
  // take it out of the address bar and history, then put it in the sign-in form.
  // On any page (a signed-in person is redirected with the fragment kept), never left behind.
  if (location.hash.indexOf("#token=") !== 0) return;
  var token = null;
  try { token = decodeURIComponent(location.hash.slice(7)); } catch (e) { token = null; }
  history.replaceState(null, "", location.pathname + location.search);
  // Filled in, not sent: a person signs in with a press, so a link someone else made cannot sign
  // them in to that someone's memories unawares (login CSRF).
  var form = document.getElementById("sign-in");
  if (form && token) {
    form.elements.token.value = token;
    var note = document.createElement("p");
    note.setAttribute("role", "status");
    note.textContent = "A sign-in link filled in the token. Press Sign in to open your memories.";
    form.parentNode.insertBefore(note, form);
    form.querySelector("button").focus();
  }
})();
"""
