/** `{@attach visible(fn)}`: call `fn` whenever the element scrolls into view (the end of an
 * endless list). A DOM effect only: what to load is the model's. */

import type { Attachment } from "svelte/attachments";

export function visible(onVisible: () => void): Attachment<HTMLElement> {
  return (el) => {
    if (typeof IntersectionObserver === "undefined") return;
    const io = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) onVisible();
    }, { rootMargin: "200px" });
    io.observe(el);
    return () => io.disconnect();
  };
}
