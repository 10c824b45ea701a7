# perftest's ib_send_lat between the compute and the storage side over rxe (RoCEv2).
on storage "setsid ib_send_lat -d rxe0 -n 200 >ib_send_lat.server 2>&1 </dev/null &" >/dev/null
# The server takes a few seconds to start listening under TCG: the client tries again while
# its connection is refused (at most 30 s).
if out=$(on compute "for i in \$(seq 15); do timeout 300 ib_send_lat -d rxe0 -n 200 $TB_STORAGE_ADDR >send_lat.out 2>&1 && { cat send_lat.out; exit 0; }
  grep -q \"Couldn't connect\" send_lat.out || break; sleep 2; done; cat send_lat.out; exit 1" 2>&1); then
  echo "$out" | grep -A2 't_typical' | sed 's/^/  /'
  echo "ok - ib_send_lat compute -> storage over rxe0 (200 iterations)"
else
  echo "$out"
  echo "not ok - ib_send_lat compute -> storage over rxe0"
fi
