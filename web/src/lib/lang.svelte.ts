// lang.svelte.ts — the explorer's current UI language as Svelte state. Reading
// `ui.lang` inside a template, $derived or $effect (t() in lib/i18n.ts does) makes that
// code run again when the language changes. Only lib/i18n.ts writes it (setLang).

export type Lang = 'en' | 'zh-CN';

export const ui: { lang: Lang } = $state({ lang: 'en' });
