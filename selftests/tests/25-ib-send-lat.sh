# perftest's ib_send_lat between the compute and the storage side over rxe (RoCEv2).
on storage "setsid ib_send_lat -d rxe0 -n 200 >ib_send_lat.server 2>&1 </dev/null & sleep 2" >/dev/null
if out=$(on compute "timeout 300 ib_send_lat -d rxe0 -n 200 $TB_STORAGE_ADDR" 2>&1); then
  echo "$out" | grep -A2 't_typical' | sed 's/^/  /'
  echo "ok - ib_send_lat compute -> storage over rxe0 (200 iterations)"
else
  echo "$out"
  echo "not ok - ib_send_lat compute -> storage over rxe0"
fi
