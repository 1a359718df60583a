/* Accessible names of the theme's buttons (pydata-sphinx-theme's templates), fixed once the
 * page is parsed. axe-core's label-content-name-mismatch rule (WCAG 2.5.3, run by the
 * browser test) flags a button whose aria-label leaves out text shown inside it:
 * - the search fields show "Search" and a "Ctrl+K" hint but are labelled "Search": the
 *   label goes, so the name is what is shown, and the hint is also the button's
 *   keyboard shortcut (aria-keyshortcuts);
 * - the colour-mode button is labelled "Color mode" and holds three icons whose title
 *   ("Light", "Dark", "System Settings") counts as text: the icons are decorative, the
 *   button's tooltip and label say what it does, so the icons lose their title and are
 *   hidden from assistive technology.
 * And a code block wider than the column (scroll-bar) can take the keyboard focus, so it
 * can be scrolled without a mouse (axe-core's scrollable-region-focusable). */
(() => {
  const fix = () => {
    document.querySelectorAll(".search-button-field[aria-label]").forEach((button) => {
      if (button.querySelector(".search-button__kbd-shortcut")) {
        button.setAttribute("aria-keyshortcuts", "Control+K");
      }
      button.removeAttribute("aria-label");
    });
    document.querySelectorAll("button[aria-label] i, .search-button-field i").forEach((icon) => {
      icon.removeAttribute("title");
      icon.setAttribute("aria-hidden", "true");
    });
    focusWideCode();
  };
  const focusWideCode = () => {
    document.querySelectorAll(".bd-article pre").forEach((pre) => {
      if (pre.scrollWidth > pre.clientWidth && !pre.hasAttribute("tabindex")) {
        pre.setAttribute("tabindex", "0");
      }
    });
  };
  // A dropdown (a solution) opened by a click shows code that was not laid out before.
  document.addEventListener("click", () => requestAnimationFrame(focusWideCode));
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fix);
  } else {
    fix();
  }
})();
