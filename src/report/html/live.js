(function(){
// The page `memseal run --live` serves: asks the server that served it for the next version of the
// page (it answers when the program's streamed report changed, or after a few seconds with the same
// one) and puts its <main> in place of this one, keeping which folded rows are open. When the
// program has ended, the page is final; when the server is gone, the page says so and stays.
var root=document.documentElement;
var updates=0;
function banner(){return document.getElementById("memseal-live");}
function openRows(main){
  var open=[];
  main.querySelectorAll("details").forEach(function(details,index){if(details.open)open.push(index);});
  return open;
}
function gone(){
  var line=banner();
  if(line){
    line.className="card live-status gone";
    line.textContent="memseal run is gone (the program ended, or memseal was stopped): this is the last report it served.";
  }
  root.dataset.memsealLive="gone";
}
function show(text){
  var next=new DOMParser().parseFromString(text,"text/html");
  var incoming=next.querySelector("main");
  var current=document.querySelector("main");
  if(!incoming||!current)throw new Error("the page it sent has no report");
  var open=openRows(current);
  var rows=incoming.querySelectorAll("details");
  open.forEach(function(index){if(rows[index])rows[index].open=true;});
  current.replaceWith(document.adoptNode(incoming));
  updates+=1;
  root.dataset.memsealUpdates=String(updates);
}
function poll(){
  var line=banner();
  if(!line)return;
  if(line.dataset.ended==="1"){root.dataset.memsealLive="ended";return;}
  fetch("/page?after="+encodeURIComponent(line.dataset.version||"0"),{cache:"no-store"})
    .then(function(response){
      if(!response.ok)throw new Error("status "+response.status);
      return response.text();
    })
    .then(function(text){show(text);setTimeout(poll,1000);})
    .catch(gone);
}
root.dataset.memsealLive="running";
setTimeout(poll,1000);
})();
