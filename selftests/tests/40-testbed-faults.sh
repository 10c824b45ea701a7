# The test bed's fault tools, which later tests depend on: netem delay and loss on the link,
# link down/up, and blocking RoCEv2 (UDP 4791) while TCP still flows.
nic=$(cat "$TB_DIR/compute.nic")
peer=$TB_STORAGE_ADDR

result() { # result OK? DESCRIPTION
  if [ "$1" = 0 ]; then echo "ok - $2"; else echo "not ok - $2"; fi
}
rtt_min_ms() { # minimum ping RTT in ms, integer (netem's delay is a floor under it)
  on compute "busybox ping -c 5 -i 0.3 -q $peer | sed -n 's|.*= \([0-9]*\)[0-9.]*/.*|\1|p'"
}

base=$(rtt_min_ms)
on compute "tc qdisc add dev $nic root netem delay 300ms" >/dev/null
slow=$(rtt_min_ms)
on compute "tc qdisc del dev $nic root" >/dev/null
[ -n "$base" ] && [ -n "$slow" ] && [ "$slow" -ge 300 ]
result $? "netem delay 300ms on the compute NIC: minimum ping RTT ${base:-?} ms -> ${slow:-?} ms"

on compute "tc qdisc add dev $nic root netem loss 100% && ! busybox ping -c 3 -W 1 -q $peer; rc=\$?; tc qdisc del dev $nic root; exit \$rc" >/dev/null
result $? "netem loss 100% on the compute NIC stops traffic; removing it restores it"

tb_link down
on compute "! busybox ping -c 3 -W 1 -q $peer" >/dev/null; down=$?
tb_link up
on compute "busybox ping -c 3 -W 2 -q $peer" >/dev/null; up=$?
[ $down = 0 ] && [ $up = 0 ]
result $? "link down (qemu set_link on both ends) stops traffic; link up restores it"

# RoCEv2 blocked on the compute side: rdma_cm cannot connect, a TCP connection still works.
# Drop on input, not output: a locally rejected send moves rxe's GSI QP (QP1) to the error
# state, after which no CM traffic flows until the device is recreated; that would test rxe,
# not an unhealthy fabric.
on storage "setsid busybox nc -l -p 7001 >tcp-got.txt 2>&1 </dev/null & setsid rping -s -a $peer -C 3 >rping-server.1 2>&1 </dev/null &" >/dev/null
on compute "nft add table ip rdmadisk_fault && nft add chain ip rdmadisk_fault in '{ type filter hook input priority 0; }' && nft add rule ip rdmadisk_fault in udp dport 4791 drop" >/dev/null
on compute "! timeout 12 rping -c -a $peer -C 3" >/dev/null; roce_blocked=$?
# The listener may take a moment to start under TCG: the client tries again while refused.
on compute "for i in \$(seq 10); do echo tcp-still-flows | busybox nc -w 5 $peer 7001 && exit 0; sleep 1; done; exit 1" >/dev/null
on storage "sleep 1; grep -q tcp-still-flows tcp-got.txt" >/dev/null; tcp_ok=$?
on compute "nft delete table ip rdmadisk_fault" >/dev/null
[ $roce_blocked = 0 ] && [ $tcp_ok = 0 ]
result $? "nftables drop of UDP 4791 blocks RoCEv2 (rping fails) while TCP still flows"
on storage "pkill rping; sleep 1; setsid rping -s -a $peer -C 3 >rping-server.2 2>&1 </dev/null &" >/dev/null
# Again, the server may not listen yet: a refused connect is tried again (at most 10 times).
on compute "for i in \$(seq 10); do timeout 60 rping -c -a $peer -C 3 && exit 0; sleep 2; done; exit 1" >/dev/null
result $? "with the rule removed, rping (rdma_cm over rxe) connects again"
on storage "pkill rping; pkill -f 'nc -l -p 7001'; true" >/dev/null
