/* The book's fixes to its themes' pages. First (at once) the sidebar buttons, see below; then
 * (once the page is parsed) the accessible names of pydata-sphinx-theme's buttons. axe-core's label-content-name-mismatch rule (WCAG 2.5.3, run by the
 * browser test) flags a button whose aria-label leaves out text shown inside it:
 * - the search fields show "Search" and a "Ctrl+K" hint but are labelled "Search": the
 *   label goes, so the name is what is shown, and the hint is also the button's
 *   keyboard shortcut (aria-keyshortcuts);
 * - the colour-mode button is labelled "Color mode" and holds three icons whose title
 *   ("Light", "Dark", "System Settings") counts as text: the icons are decorative, the
 *   button's tooltip and label say what it does, so the icons lose their title and are
 *   hidden from assistive technology. FontAwesome's script, deferred like this one, draws
 *   each <i> again as an <svg> that carries the title as a <title>, and it can do so before
 *   this script runs or while it runs (when this file arrives late): so the drawn icons are
 *   quieted too, and again whenever FontAwesome redraws them.
 * And a code block wider than the column (scroll-bar) can take the keyboard focus, so it
 * can be scrolled without a mouse (axe-core's scrollable-region-focusable). */
(() => {
  // pydata-sphinx-theme 0.17 writes a header bar of its own (#pst-header) above
  // sphinx-book-theme's article header: on a wide screen it repeats the sidebar's search
  // field, and it holds hidden copies of the two sidebar buttons. Both themes' scripts wire
  // the first `.primary-toggle` and `.secondary-toggle` of the page, which were those hidden
  // copies, so the visible buttons of the article header did nothing but show a tooltip
  // (phones could not open the chapter list; the desktop toggle did not hide the sidebar).
  // This script is deferred in <head>, so it runs before the themes' scripts look for the
  // buttons: once the copies are gone, they wire the visible ones. The bar itself stays in
  // the page, hidden by attnbook.css: both themes' scripts measure it.
  document.querySelectorAll("#pst-header .sidebar-toggle").forEach((copy) => copy.remove());

  // MathJax draws a script at 71% of its formula's size and a script of a script (the s' of
  // e^{z_{s'}}) at 50%, no smaller than MathML's scriptminsize, 8 px: beside 16 px text these
  // measured 8.7 to 10.2 px, depending on the fonts MathJax matches. A script is never drawn
  // under SCRIPT_MIN_SIZE now (the browser test measures one). MathJax's script comes after this
  // one, deferred too, and the page has set its configuration (window.MathJax) before either
  // runs: its startup sets the default before the first formula is typeset.
  const SCRIPT_MIN_SIZE = "11px";
  const mathJax = window.MathJax;
  if (mathJax && !mathJax.version) {
    const startup = (mathJax.startup = mathJax.startup || {});
    const ready = startup.ready;
    startup.ready = () => {
      const nodes = MathJax._.core.MmlTree.MmlNodes;
      nodes.math.MmlMath.defaults.scriptminsize = SCRIPT_MIN_SIZE;
      nodes.mstyle.MmlMstyle.defaults.scriptminsize = SCRIPT_MIN_SIZE; // \scriptstyle and such
      return ready ? ready() : MathJax.startup.defaultReady();
    };
  }

  // A solution's header ("Solution to Exercise 7.1 (...)") is one button that opens the
  // solution (sphinx-togglebutton), but the exercise's name in it is a link: a click there
  // jumped up to the exercise and left the solution closed (and threw in togglebutton's
  // handler, which finds no button from a link). A click on the link now opens or closes the
  // solution like a click anywhere else on the header; the exercise is just above it.
  document.addEventListener(
    "click",
    (event) => {
      const link = event.target.closest && event.target.closest(".dropdown > .admonition-title a");
      const button = link && link.closest(".admonition-title").querySelector(".toggle-button");
      if (button) {
        event.preventDefault();
        event.stopPropagation();
        button.click();
      }
    },
    true,
  );

  // bertviz's model view draws an SVG of a fixed width (970 px), wider than the column: its
  // last head was cut off. Given a viewBox of its own size, attnbook.css scales it down to
  // the column. It draws again when the reader picks another layer or attention kind, so
  // each view is watched. On a phone, scaled to the column, its 13 px labels would shrink to
  // about 5 px: there attnbook.css shows it at its own size in a box that scrolls sideways,
  // and the hint put before the view (shown only there) says so.
  const fitBertviz = (view) => {
    view.querySelectorAll(":scope svg:not(svg svg)").forEach((svg) => {
      const width = Number(svg.getAttribute("width"));
      const height = Number(svg.getAttribute("height"));
      if (width > 0 && height > 0 && !svg.hasAttribute("viewBox")) {
        svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
      }
      if (width > 0 && !view.classList.contains("attnbook-bertviz-wide")) {
        view.classList.add("attnbook-bertviz-wide");
        const hint = document.createElement("p");
        hint.className = "attnbook-bertviz-hint";
        hint.textContent = "Wider than the screen: swipe sideways to see every head \u2192";
        view.before(hint);
      }
    });
  };
  // Apply `mend` to `element` now, and again whenever a script changes what it holds.
  const keepFixed = (element, mend) => {
    mend(element);
    new MutationObserver(() => mend(element)).observe(element, {childList: true, subtree: true});
  };
  const watchBertviz = () => {
    document
      .querySelectorAll('div[id^="bertviz-"]')
      .forEach((view) => keepFixed(view, fitBertviz));
  };

  // On a phone a figure keeps the width at which its text is legible (attnbook.css), in its
  // link, which then scrolls sideways: the link is marked `attnbook-scrolls` while it is wider
  // than its box, and attnbook.css shows the cue's sentence that says so. Watched for
  // changes of size: a turned phone, a solution opened (its figures had no size while hidden).
  const markScrolling = (links) => {
    links.forEach((link) => {
      const scrolls = link.scrollWidth > link.clientWidth + 1;
      if (link.classList.contains("attnbook-scrolls") !== scrolls) {
        link.classList.toggle("attnbook-scrolls", scrolls);
      }
    });
  };
  const watchWideFigures = () => {
    const links = document.querySelectorAll(".bd-article a.attnbook-wide-figure");
    if (!links.length || typeof ResizeObserver === "undefined") return;
    const observer = new ResizeObserver((entries) => markScrolling(entries.map((e) => e.target)));
    links.forEach((link) => observer.observe(link));
  };

  // An icon inside a labelled button: an <i> before FontAwesome draws it, an <svg> after.
  const quietIcons = (button) => {
    button.querySelectorAll("i, svg").forEach((icon) => {
      icon.removeAttribute("title");
      icon.removeAttribute("aria-labelledby");
      icon.querySelectorAll("title").forEach((title) => title.remove());
      icon.setAttribute("aria-hidden", "true");
    });
  };

  const fix = () => {
    document.querySelectorAll(".search-button-field[aria-label]").forEach((button) => {
      if (button.querySelector(".search-button__kbd-shortcut")) {
        button.setAttribute("aria-keyshortcuts", "Control+K");
      }
      button.removeAttribute("aria-label");
    });
    document
      .querySelectorAll("button[aria-label], .search-button-field")
      .forEach((button) => keepFixed(button, quietIcons));
    focusWideCode();
    watchWideFigures();
    watchBertviz();
    improveSearch();
  };
  const focusWideCode = () => {
    document.querySelectorAll(".bd-article pre").forEach((pre) => {
      if (pre.scrollWidth > pre.clientWidth && !pre.hasAttribute("tabindex")) {
        pre.setAttribute("tabindex", "0");
      }
    });
  };
  // The search page's results quote each page's text around the words found: its formulas
  // came as raw TeX (\(T \times S\)), and the article's header (its download menu, ".pdf")
  // came first. The header is left out of the text the summaries are cut from, and each
  // summary is typeset by MathJax, which _ext loads on the search page (a formula cut in two
  // by the summary's ends stays as it is).
  const typesetSummaries = (results) => {
    const fresh = [...results.querySelectorAll("p.context:not([data-attnbook-typeset])")];
    if (!fresh.length || !window.MathJax || !window.MathJax.typesetPromise) return;
    fresh.forEach((summary) => summary.setAttribute("data-attnbook-typeset", ""));
    MathJax.startup.promise.then(() => MathJax.typesetPromise(fresh)).catch(() => {});
  };
  // A result found by a section's title shows that title as its link, in the plain text the
  // search index stores ("Why divide by \\sqrt{d_k}?"). _ext writes, for the search page only,
  // window.attnbookSearchTitles: each title holding a formula -> the title with its formulas
  // marked. The link's last text ("Chapter > Why divide by ...") that ends with such a title
  // gets the marked one, and the link is typeset like a summary.
  const typesetTitles = (results) => {
    const titles = window.attnbookSearchTitles || {};
    const fresh = [...results.querySelectorAll("ul.search li > a:not([data-attnbook-typeset])")];
    if (!fresh.length || !window.MathJax || !window.MathJax.typesetPromise) return;
    const marked = fresh.filter((link) => {
      link.setAttribute("data-attnbook-typeset", "");
      const text = [...link.childNodes].filter((node) => node.nodeType === Node.TEXT_NODE).pop();
      const title = text && Object.keys(titles)
        .sort((a, b) => b.length - a.length)
        .find((raw) => text.data.endsWith(raw));
      if (!title) return false;
      const span = document.createElement("span");
      span.innerHTML = titles[title];
      text.data = text.data.slice(0, -title.length);
      text.after(span);
      return true;
    });
    if (marked.length) {
      MathJax.startup.promise.then(() => MathJax.typesetPromise(marked)).catch(() => {});
    }
  };
  const improveSearch = () => {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.attnbookHeaderless) return;
    const htmlToText = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      page.querySelectorAll(".bd-header-article").forEach((header) => header.remove());
      return htmlToText(page.documentElement.outerHTML, anchor);
    };
    Search.attnbookHeaderless = true;
    const results = document.getElementById("search-results");
    if (results) {
      new MutationObserver(() => {
        typesetSummaries(results);
        typesetTitles(results);
      }).observe(results, {
        childList: true,
        subtree: true,
      });
    }
  };

  // A dropdown (a solution) opened by a click shows code that was not laid out before.
  document.addEventListener("click", () => requestAnimationFrame(focusWideCode));
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fix);
  } else {
    fix();
  }
})();
