// The status page's HTML (server/dashboard.h): inline CSS and a small script, no build step,
// no CDN. Page() inlines the snapshot at the marker below; the script renders it at once,
// then polls /dashboard.json every 2 s. Every number with a data-stat="path" attribute shows
// the snapshot's value at that path (also in its data-value attribute); the paths under
// "cache." are GET /v1/cache/stats's (the e2e test compares them). Prompt text is set with
// textContent only, never parsed as HTML.
#include "server/dashboard.h"

namespace kvtier::server {

const char kDashboardHtml[] = R"KVTIER(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvtier status</title>
<style>
:root{--bg:#f4f5f7;--card:#fff;--ink:#1d2330;--mute:#6b7385;--line:#e3e6ec;--act:#3b6fd8;--ram:#2f9e6e;--ssd:#c9822b;--bad:#c8463d;
--k0:#b9bfcc;--k1:#2f9e6e;--k2:#3b6fd8;--k3:#8a5cc7;--k4:#c9822b}
*{box-sizing:border-box}body{margin:0;font:13px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;background:var(--bg);color:var(--ink)}
header{display:flex;align-items:baseline;gap:18px;flex-wrap:wrap;padding:12px 20px;background:#1d2330;color:#fff}
header h1{font-size:17px;margin:0;font-weight:600}header .m{color:#aab3c5}header b{color:#fff;font-weight:600}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:14px;padding:14px 20px}
section{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:12px 14px}
section.wide{grid-column:1/-1}
h2{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:var(--mute);margin:0 0 10px;font-weight:600}
.tier{margin:0 0 12px}.tier:last-child{margin:0}
.tl{display:flex;justify-content:space-between;gap:8px}.tl .n{font-weight:600}.tl .f{color:var(--mute)}
.bar{height:14px;background:#eceef2;border-radius:3px;overflow:hidden;margin:4px 0 2px}
.bar i{display:block;height:100%}.sub{color:var(--mute);font-size:12px}
table{width:100%;border-collapse:collapse}th,td{text-align:left;padding:3px 6px;border-bottom:1px solid var(--line);white-space:nowrap}
th{color:var(--mute);font-weight:500;font-size:12px}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
td.t{white-space:normal;font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:11px;color:#39414f;max-width:420px;overflow-wrap:anywhere}
.kpis{display:flex;gap:22px;flex-wrap:wrap}.kpi .v{font-size:22px;font-weight:600;font-variant-numeric:tabular-nums}.kpi .l{color:var(--mute);font-size:12px}
.sw{display:inline-block;width:9px;height:9px;border-radius:2px;margin-right:5px;vertical-align:0}
svg{display:block;width:100%}svg text{font-size:11px;fill:var(--mute)}
.empty{color:var(--mute);font-style:italic}.two{display:grid;grid-template-columns:1fr 1fr;gap:14px}
.req{display:grid;grid-template-columns:minmax(260px,1fr) 1fr 1fr;gap:18px;align-items:start}.kv{gap:14px 22px}
footer{color:var(--mute);padding:0 20px 14px;font-size:12px}
</style></head><body>
<header><h1>kvtier</h1><span class="m">model <b id="model"></b></span><span class="m">up <b id="uptime"></b></span>
<span class="m">running <b data-stat="requests.running"></b></span><span class="m">waiting <b data-stat="requests.waiting"></b></span>
<span class="m" id="status">live</span></header>
<main>
<section><h2>Tiers: bytes against budgets</h2><div id="tiers"></div></section>
<section><h2>Prefix cache lookups</h2>
<div class="kpis"><div class="kpi"><div class="v" id="hitpct"></div><div class="l">hit rate (all time)</div></div>
<div class="kpi"><div class="v" data-stat="cache.prefix_cache.lookups"></div><div class="l">lookups</div></div>
<div class="kpi"><div class="v" data-stat="cache.prefix_cache.tokens_reused"></div><div class="l">tokens reused</div></div>
<div class="kpi"><div class="v" data-stat="cache.prefix_cache.entries"></div><div class="l">entries in RAM</div></div></div>
<table style="margin-top:8px"><thead><tr><th>match kind</th><th class="r">lookups</th><th class="r">share</th></tr></thead><tbody id="kinds"></tbody></table></section>
<section><h2>Hit rate by match kind, last <span id="window"></span> min</h2><svg id="hitchart" viewBox="0 0 420 150" height="150"></svg><div id="legend" class="sub"></div></section>
<section class="wide"><h2>Requests</h2><div class="req"><div class="kpis kv">
<div class="kpi"><div class="v" data-stat="requests.running"></div><div class="l">running</div></div>
<div class="kpi"><div class="v" data-stat="requests.waiting"></div><div class="l">waiting</div></div>
<div class="kpi"><div class="v" data-stat="requests.finished"></div><div class="l">finished</div></div>
<div class="kpi"><div class="v" data-stat="requests.cancelled"></div><div class="l">cancelled</div></div>
<div class="kpi"><div class="v" data-stat="requests.preemptions"></div><div class="l">preemptions</div></div>
<div class="kpi"><div class="v" data-stat="requests.cached_tokens"></div><div class="l">cached prompt tokens</div></div></div>
<div><div class="sub">time to first token · <span id="ttftn"></span></div><svg id="ttft" viewBox="0 0 420 112" height="112"></svg></div>
<div><div class="sub">generation speed, tokens/s per request · <span id="tpsn"></span></div><svg id="tps" viewBox="0 0 420 112" height="112"></svg></div></div></section>
<section class="wide"><h2>Hottest cached prefixes</h2><table><thead><tr><th class="r">#</th><th class="r">tokens</th><th class="r">blocks</th><th>format</th><th>tier</th><th class="r">hits</th><th class="r">last use</th><th id="texth">prompt</th></tr></thead><tbody id="hot"></tbody></table></section>
<section class="wide"><h2>Recent tier events</h2><table><thead><tr><th>time</th><th>event</th><th class="r">blocks</th><th class="r">bytes</th></tr></thead><tbody id="events"></tbody></table>
<div class="sub" style="margin-top:6px">SSD: spilled <span data-stat="cache.ssd.spilled_blocks"></span> · reloaded <span data-stat="cache.ssd.loaded_blocks"></span> · quarantined <span data-stat="cache.ssd.quarantined"></span> · evicted <span data-stat="cache.ssd.evicted_blocks"></span> · queued <span data-stat="cache.ssd.queued"></span>
&nbsp; RAM: evicted <span data-stat="cache.prefix_cache.evicted_blocks"></span> · promoted from SSD <span data-stat="cache.prefix_cache.promoted_blocks"></span></div></section>
</main>
<footer>Read-only; refreshes every 2 s from <a href="/dashboard.json">/dashboard.json</a>. Also: <a href="/metrics">/metrics</a>, <a href="/v1/cache/stats">/v1/cache/stats</a>.</footer>
<script>
"use strict";
const DATA=/*KVTIER_DATA*/null;
const KINDS=["exact","prefix","supersequence","lcp","miss"];
const KC={miss:"var(--k0)",exact:"var(--k1)",prefix:"var(--k2)",supersequence:"var(--k3)",lcp:"var(--k4)"};
const EV={ram_evict:"RAM eviction",spill:"spilled to SSD",reload:"reloaded from SSD",promote:"promoted into RAM",promote_failed:"promotion failed",quarantine:"SSD quarantine",ssd_evict:"SSD eviction (cap)",spill_skipped:"spill skipped"};
const $=(id)=>document.getElementById(id);
const num=(v)=>v==null?"–":Number(v).toLocaleString("en-US");
function bytes(b){if(b==null)return"–";const u=["B","KiB","MiB","GiB","TiB"];let i=0,v=b;while(v>=1024&&i<u.length-1){v/=1024;i++;}return(i?v.toFixed(v<10?2:1):v)+" "+u[i];}
function reqs(n){return num(n)+(n===1?" request":" requests");}
function ago(ms){const s=ms/1000;return s<1?"now":s<90?Math.round(s)+" s ago":s<5400?Math.round(s/60)+" min ago":(s/3600).toFixed(1)+" h ago";}
function get(o,path){for(const k of path.split(".")){if(o==null)return undefined;o=o[k];}return o;}
function el(tag,attrs,text){const e=document.createElement(tag);for(const k in attrs||{})e.setAttribute(k,attrs[k]);if(text!=null)e.textContent=text;return e;}
function svgEl(tag,attrs){const e=document.createElementNS("http://www.w3.org/2000/svg",tag);for(const k in attrs)e.setAttribute(k,attrs[k]);return e;}
function stat(path,v,fmt){const e=el("span",{"data-stat":path,"data-value":String(v)},fmt?fmt(v):num(v));return e;}
function tier(name,color,used,budget,usedPath,budgetPath,extra,formats){
 const d=el("div",{class:"tier"});const pct=budget>0?Math.min(100,100*used/budget):0;
 const tl=el("div",{class:"tl"});const n=el("span",{class:"n"},name);tl.append(n);
 const r=el("span");r.append(stat(usedPath,used,bytes)," of ",stat(budgetPath,budget,bytes)," ("+pct.toFixed(1)+"%)");tl.append(r);d.append(tl);
 const bar=el("div",{class:"bar"});const fill=el("i");fill.style.width=pct+"%";fill.style.background=color;bar.append(fill);d.append(bar);
 const s=el("div",{class:"sub"});for(const x of extra)s.append(...x);if(formats)s.append(" · formats: "+formats);d.append(s);return d;}
function fmts(list,blocks){return(list||[]).map(f=>(f.k_format===f.v_format?f.k_format:f.k_format+"/"+f.v_format)+" "+(blocks?num(f.blocks)+" blocks":bytes(f.bytes))).join(", ")||"none";}
function render(D){
 $("model").textContent=D.model;const up=D.uptime_s;$("uptime").textContent=up<120?Math.round(up)+" s":up<7200?Math.round(up/60)+" min":(up/3600).toFixed(1)+" h";
 document.querySelectorAll("[data-stat]").forEach(e=>{if(e.closest("#tiers"))return;const v=get(D,e.dataset.stat);e.dataset.value=String(v);e.textContent=num(v);});
 const c=D.cache,T=$("tiers");T.replaceChildren();
 if(c.active_pool){const a=c.active_pool;T.append(tier("Active KV pool","var(--act)",a.bytes_in_use,a.capacity_bytes,"cache.active_pool.bytes_in_use","cache.active_pool.capacity_bytes",
  [[stat("cache.active_pool.blocks_in_use",a.blocks_in_use)," of ",stat("cache.active_pool.capacity_blocks",a.capacity_blocks)," blocks"]],a.k_format===a.v_format?a.k_format:a.k_format+"/"+a.v_format));}
 if(c.prefix_cache){const p=c.prefix_cache;T.append(tier("RAM prefix cache","var(--ram)",p.bytes,p.budget_bytes,"cache.prefix_cache.bytes","cache.prefix_cache.budget_bytes",
  [[stat("cache.prefix_cache.entries",p.entries)," entries · "+num(p.by_format.reduce((s,f)=>s+f.blocks,0))+" blocks"]],fmts(p.by_format)));}
 else T.append(el("div",{class:"tier empty"},"RAM prefix cache: off"));
 if(c.ssd){const s=c.ssd;T.append(tier("SSD tier","var(--ssd)",s.bytes,s.max_bytes,"cache.ssd.bytes","cache.ssd.max_bytes",
  [[stat("cache.ssd.blocks",s.blocks)," blocks in files"]],fmts(s.by_format,true)));}
 else T.append(el("div",{class:"tier empty"},"SSD tier: off (--ssd-cache-dir)"));
 if(c.remote){const r=c.remote,d=el("div",{class:"tier"}),tl=el("div",{class:"tl"});
  tl.append(el("span",{class:"n"},r.cluster?"Remote tier (Redis Cluster)":"Remote tier (Redis)"));
  const w=el("span");w.append(stat("cache.remote.written_bytes",r.written_bytes,bytes)," written");tl.append(w);d.append(tl);
  const m=Object.values(r.misses||{}).reduce((a,b)=>a+b,0);const s=el("div",{class:"sub"});
  s.append(stat("cache.remote.hits",r.hits)," hits (",stat("cache.remote.hit_bytes",r.hit_bytes,bytes),") · "+num(m)+" misses · ",
   stat("cache.remote.written_blocks",r.written_blocks)," blocks written · ",stat("cache.remote.timeouts",r.timeouts)," timeouts · ",
   stat("cache.remote.write_errors",r.write_errors)," write errors");d.append(s);T.append(d);}
 else T.append(el("div",{class:"tier empty"},"Remote tier: off (--remote-cache)"));
 const p=c.prefix_cache,K=$("kinds");K.replaceChildren();$("hitpct").textContent="–";
 if(p){const hits=p.lookups-(p.hits.miss||0);$("hitpct").textContent=p.lookups?(100*hits/p.lookups).toFixed(1)+"%":"–";
  for(const k of KINDS){const tr=el("tr");const td=el("td");td.append(el("span",{class:"sw",style:"background:"+KC[k]}),k);tr.append(td);
   const v=el("td",{class:"r"});v.append(stat("cache.prefix_cache.hits."+k,p.hits[k]));tr.append(v,el("td",{class:"r"},p.lookups?(100*p.hits[k]/p.lookups).toFixed(1)+"%":"–"));K.append(tr);}}
 hitChart(D.hit_rate);hist($("ttft"),D.ttft_s,(b)=>b<1?Math.round(b*1000)+"ms":b+"s");$("ttftn").textContent=reqs(D.ttft_s.count);
 hist($("tps"),D.tokens_per_s,(b)=>String(b));$("tpsn").textContent=reqs(D.tokens_per_s.count);
 const H=$("hot");H.replaceChildren();$("texth").textContent=D.show_text?"prompt":"prompt (--dashboard-show-text)";
 if(!D.hottest.length){const tr=el("tr");tr.append(el("td",{colspan:8,class:"empty"},"no cached prefixes"));H.append(tr);}
 D.hottest.forEach((h,i)=>{const tr=el("tr");tr.append(el("td",{class:"r"},i+1),el("td",{class:"r"},num(h.tokens)),el("td",{class:"r"},num(h.blocks)),el("td",{},h.format),
  el("td",{},h.tier.toUpperCase()+(h.in_use?" · in use":"")+(h.pinned?" · pinned":"")),el("td",{class:"r"},num(h.hits)),el("td",{class:"r"},ago(h.idle_ms)),el("td",{class:"t"},D.show_text?h.text:"hidden"));H.append(tr);});
 const E=$("events");E.replaceChildren();
 if(!D.events.length){const tr=el("tr");tr.append(el("td",{colspan:4,class:"empty"},"no tier events yet"));E.append(tr);}
 for(const e of D.events){const tr=el("tr");tr.append(el("td",{},new Date(e.unix_ms).toLocaleTimeString("en-GB")),el("td",{},EV[e.kind]||e.kind),el("td",{class:"r"},num(e.count)),el("td",{class:"r"},e.bytes?bytes(e.bytes):"–"));E.append(tr);}
 document.body.dataset.rendered=String(D.now_unix_ms);
}
function hitChart(h){const S=$("hitchart");S.replaceChildren();const B=h.buckets,W=420,H=130,n=B.length;$("window").textContent=Math.round(n*h.bucket_s/60);
 let max=0;for(const b of B)max=Math.max(max,KINDS.reduce((s,k)=>s+b[k],0));const top=max;max=Math.max(max,1);const bw=W/n;
 B.forEach((b,i)=>{let y=H;for(const k of KINDS){if(!b[k])continue;const hh=H*b[k]/max;y-=hh;S.append(svgEl("rect",{x:i*bw+1,y:y,width:Math.max(1,bw-2),height:hh,fill:KC[k]}));}});
 S.append(svgEl("line",{x1:0,y1:H,x2:W,y2:H,stroke:"#cfd4dc"}));const t=svgEl("text",{x:2,y:10});t.textContent=top?"peak "+top+" lookups / "+h.bucket_s+" s":"no lookups in this window";S.append(t);
 const t2=svgEl("text",{x:W-2,y:H+14,"text-anchor":"end"});t2.textContent="now";S.append(t2);const t3=svgEl("text",{x:2,y:H+14});t3.textContent="-"+Math.round(n*h.bucket_s/60)+" min";S.append(t3);
 const L=$("legend");L.replaceChildren();for(const k of KINDS){L.append(el("span",{class:"sw",style:"background:"+KC[k]}),k+"  ");}}
function hist(S,h,lab){S.replaceChildren();const n=h.counts.length,W=420,H=92,every=n>12?3:n>8?2:1;let max=1;for(const c of h.counts)max=Math.max(max,c);const bw=W/n;
 h.counts.forEach((c,i)=>{const hh=(H-16)*c/max;S.append(svgEl("rect",{x:i*bw+1,y:H-hh,width:bw-2,height:Math.max(hh,c?1:0),fill:"var(--act)"}));
  if(c){const v=svgEl("text",{x:i*bw+bw/2,y:H-hh-3,"text-anchor":"middle"});v.textContent=c;S.append(v);}
  if(i%every===0){const t=svgEl("text",{x:i*bw+bw/2,y:H+13,"text-anchor":"middle"});t.textContent=i<h.bounds.length?"≤"+lab(h.bounds[i]):"more";S.append(t);}});
 S.append(svgEl("line",{x1:0,y1:H,x2:W,y2:H,stroke:"#cfd4dc"}));}
async function poll(){try{const r=await fetch("/dashboard.json",{cache:"no-store"});if(!r.ok)throw new Error(r.status);render(await r.json());$("status").textContent="live";}
 catch(e){$("status").textContent="offline ("+e.message+")";}}
if(DATA)render(DATA);setInterval(poll,2000);
</script></body></html>
)KVTIER";

}  // namespace kvtier::server
