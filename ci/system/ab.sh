# shellcheck shell=bash
# Variables of ci/check-system.sh, which sources this file:
# shellcheck disable=SC2154,SC2034,SC2153
# The A/B update test (issue 30), sourced by ci/check-system.sh after the system test: the same
# guest root filesystem (the .deb installed as a user would, Debian's RT kernel) made into an
# A/B disk that boots through U-Boot, updated with RAUC bundles signed by a key pair made here,
# and rolled back by U-Boot's boot counter when the new slot's health gate does not pass.
# See ci/system/README.md, "A/B updates". Uses from check-system.sh: out, cache, sys, G_APPEND,
# GUEST_NR_CPUS, icount, die, inroot, the guest rootfs kept in $AB_ROOT.
AB_DIR=""
AB_COMPATIBLE=rtcat-systest-qemu-arm64
AB_ENV_SIZE=0x4000
# the slots: the slim slot image (about 320 MB, ab_slim) and room for the HTTP install's
# download into /tmp (Debian's RAUC 1.8 has no streaming), RAUC resizes the image to the slot
AB_SLOT_MB=768
AB_DATA_MB=256
AB_BOOT_MB=32
AB_HTTP_PID=""
AB_UBOOT=/usr/lib/u-boot/qemu_arm64/u-boot.bin
# wall-clock limit of the whole A/B guest run (six boots, two installs), RTCAT_AB_TIMEOUT to change
AB_TIMEOUT=${RTCAT_AB_TIMEOUT:-3600}
# the boot script the boards use (meta-rtcat's rtcat-ab-boot), filled in for this disk
AB_BOOT_CMD=yocto-layer/recipes-bsp/rtcat-ab-boot/files/boot.cmd.in

ab_tools() {
	# rauc (bundles), u-boot-qemu (the firmware), u-boot-tools (mkimage, mkenvimage), mtools +
	# dosfstools (the FAT partition), fdisk (sfdisk), squashfs-tools (rauc bundle), openssl
	ensure_apt rauc u-boot-qemu u-boot-tools mtools dosfstools fdisk squashfs-tools openssl
	[ -r "$AB_UBOOT" ] || die "u-boot-qemu has no $AB_UBOOT"
	rauc --version
}

# ab_keys: the development key pair, made for this run (never stored): the bundles' signer and
# the guest's keyring; and an untrusted one for the negative control.
ab_keys() {
	local k=$AB_DIR/keys n
	rm -rf "$k" && mkdir -p "$k"
	for n in dev untrusted; do
		openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 2 -subj "/O=rtcat/CN=rtcat $n signer (test run)" \
			-keyout "$k/$n.key.pem" -out "$k/$n.cert.pem" 2>/dev/null || die "openssl could not make the $n key pair"
	done
	chmod 600 "$k"/*.key.pem
}

# ab_root ROOT: make the system test's guest rootfs an A/B slot: rauc, the boot env tools, the
# image's A/B units and configuration, the test's driver.
ab_root() {
	local r=$1 m
	for m in proc sys dev; do mount --bind "/$m" "$r/$m"; done
	root=$r
	# apt inside the chroot, with the host's arm64 lists of the same archive (check-system's
	# private apt) and the downloaded packages kept in the cache
	mkdir -p "$cache/ab-debs" "$r/var/lib/apt/lists"
	cp "$cache/apt-arm64/lists/"*bookworm_InRelease "$cache/apt-arm64/lists/"*bookworm_main_binary-arm64_Packages* "$r/var/lib/apt/lists/"
	mount --bind "$cache/ab-debs" "$r/var/cache/apt/archives"
	inroot apt-get install -y -q --no-install-recommends rauc rauc-service libubootenv-tool >"$AB_DIR/apt.log" 2>&1 ||
		{ tail -20 "$AB_DIR/apt.log" >&2; umount "$r/var/cache/apt/archives"; die "apt-get install rauc in the A/B rootfs failed"; }
	umount "$r/var/cache/apt/archives"
	inroot rauc --version
	# the image's A/B files (rootfs-overlay), as the Yocto image installs them
	local f
	for f in usr/lib/rtcat/rtcat-health-gate usr/lib/rtcat/rtcat-persist; do install -D -m 0755 "rootfs-overlay/$f" "$r/$f"; done
	for f in usr/lib/systemd/system/rtcat-health-gate.service usr/lib/systemd/system/rtcat-persist.service etc/rtcat/health-gate.conf; do
		install -D -m 0644 "rootfs-overlay/$f" "$r/$f"
	done
	# the guest proves itself faster than a board is asked to (the shipped values: 60 s / 300 s)
	sed -i 's/^HOLD_S=.*/HOLD_S=10/; s/^TIMEOUT_S=.*/TIMEOUT_S=120/' "$r/etc/rtcat/health-gate.conf"
	mkdir -p "$r/etc/rauc" "$r/uboot" "$r/data"
	sed "s/@COMPATIBLE@/$AB_COMPATIBLE/" "$sys/ab/system.conf" >"$r/etc/rauc/system.conf"
	cp "$AB_DIR/keys/dev.cert.pem" "$r/etc/rauc/keyring.pem"
	printf '# U-Boot environment (ci/system/ab/boot.cmd): a file on the FAT boot partition\n/uboot/uboot.env 0x0 %s\n' "$AB_ENV_SIZE" >"$r/etc/fw_env.config"
	cat >"$r/etc/fstab" <<-FSTAB
		# A/B disk: 1 boot (FAT: boot.scr, uboot.env), 2 slot A, 3 slot B, 4 data
		PARTLABEL=boot /uboot vfat defaults,sync 0 0
		PARTLABEL=data /data ext4 defaults 0 2
	FSTAB
	# the kernel and initramfs at fixed names for the boot script (hard links: one copy)
	ln -f "$(find "$r/boot" -maxdepth 1 -name 'vmlinuz-*' | sort | tail -1)" "$r/boot/vmlinuz"
	ln -f "$(find "$r/boot" -maxdepth 1 -name 'initrd.img-*' | sort | tail -1)" "$r/boot/initrd.img"
	install -D -m 0755 "$sys/ab/ab-guest.sh" "$r/usr/local/lib/rtcat-systest/ab-guest.sh"
	install -m 0644 "$sys/ab/rtcat-systest-ab.service" "$r/etc/systemd/system/"
	inroot systemctl disable rtcat-systest.service
	inroot systemctl enable rtcat-persist.service rtcat-health-gate.service rtcat-systest-ab.service
	for m in dev sys proc; do umount -l "$r/$m"; done
	root=""
	ab_slim "$r"
}

# ab_slim ROOT: the slots carry what the A/B guest boots and runs, not all of the system test's
# tree: every byte of a slot image is compressed into the bundles, hashed by dm-verity,
# decompressed and written by `rauc install` under TCG (the 714 MB image of the whole tree took
# 258 s of host time to install). Left out: documentation, manual pages, translations, apt's
# lists and caches, the kernel package's device trees (QEMU's U-Boot passes its own; the boot
# script loads /boot/$fdtfile only when U-Boot names one) and the modules of hardware the QEMU
# virt machine does not have. Kept: the kernel's fs/, net/, crypto/, lib/, block/ and arch/
# modules, and the drivers of virtio (disk, network, rng), loop and device mapper (RAUC's
# verity bundles), veth (the cable), RTC and char devices; checked below to resolve.
AB_MODULES="virtio_blk virtio_net virtio_rng ext4 vfat nls_cp437 nls_ascii squashfs loop dm_verity veth"
ab_slim() {
	local r=$1 before rel md m
	before=$(du -sm "$r" | cut -f1)
	rm -rf "$r/usr/share/"{doc,man,info,locale,lintian} "$r/var/lib/apt/lists/"* "$r/var/cache/apt/"*.bin \
		"$r/var/cache/debconf/"*-old "$r/usr/lib/linux-image-"*
	rel=$(find "$r/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tail -1)
	md=$r/lib/modules/$rel/kernel
	[ -d "$md" ] || die "the A/B rootfs has no kernel modules ($md)"
	(cd "$md" && find . -name '*.ko*' -printf '%P\n' |
		grep -vE '^(fs|net|crypto|lib|block|arch)/|^drivers/(virtio|block|md|char|rtc)/|^drivers/net/(veth|virtio_net|net_failover|dummy|tun)\.ko' |
		xargs -r rm -f)
	# (no radio here: cfg80211 would be loaded and read its certificates at every boot)
	rm -rf "$md/net/"{wireless,mac80211,bluetooth}
	find "$md" -type d -empty -delete
	depmod -b "$r" "$rel"
	for m in $AB_MODULES; do
		modprobe -d "$r" -S "$rel" --show-depends "$m" >/dev/null 2>&1 || die "ab_slim: module $m of $rel left out of the A/B slots"
	done
	echo "A/B slot tree: ${before} MB -> $(du -sm "$r" | cut -f1) MB ($(find "$md" -name '*.ko*' | wc -l) modules)"
}

# ab_ext4 ROOT ID FILE: the slot image of ROOT, marked ID (/etc/rtcat-systest-image), sized to
# its content (RAUC writes it into the slot and resizes it: system.conf resize=true).
ab_ext4() {
	local r=$1 mb
	echo "$2" >"$r/etc/rtcat-systest-image"
	# room for the file system's own blocks (journal, inode tables) and a little more: RAUC
	# writes every block of the image, empty ones too
	mb=$(($(du -sm "$r" | cut -f1) * 9 / 8 + 48))
	[ "$mb" -le "$AB_SLOT_MB" ] || die "the A/B slot image ($mb MB) does not fit AB_SLOT_MB=$AB_SLOT_MB"
	rm -f "$3"
	mkfs.ext4 -q -L rootfs -d "$r" "$3" "${mb}M"
}

# ab_bundle DIR IMAGE OUT COMPATIBLE KEY VERSION: a verity bundle of IMAGE
ab_bundle() {
	local d=$1
	rm -rf "$d" && mkdir -p "$d"
	ln "$2" "$d/rootfs.ext4" 2>/dev/null || cp "$2" "$d/rootfs.ext4"
	cat >"$d/manifest.raucm" <<-MF
		[update]
		compatible=$4
		version=$6
		description=rtcat system test bundle ($6)

		[bundle]
		format=verity

		[image.rootfs]
		filename=rootfs.ext4
	MF
	rm -f "$3"
	# zstd instead of mksquashfs' default gzip: the guest decompresses the bundle under TCG
	# (the kernel's squashfs reads zstd since 4.14; RAUC passes the arguments to mksquashfs)
	rauc bundle --cert="$AB_DIR/keys/$5.cert.pem" --key="$AB_DIR/keys/$5.key.pem" \
		--mksquashfs-args="-comp zstd -Xcompression-level 3" "$d" "$3" >>"$AB_DIR/bundle.log" 2>&1 ||
		{ tail -20 "$AB_DIR/bundle.log" >&2; die "rauc bundle $3 failed"; }
	rm -rf "$d"
}

# ab_took WHAT: the time since the last ab_took (the parts of the slots/bundles/disk phase)
AB_T=0
ab_took() {
	printf '  A/B image: %-40s %4ds\n' "$1" $((SECONDS - AB_T)) | tee -a "$AB_DIR/image-times.txt"
	AB_T=$SECONDS
}

ab_image() {
	AB_DIR="$out/ab"
	AB_T=$SECONDS
	local r=$AB_ROOT w s1 s2 s3 s4 link
	[ -d "$r" ] || die "no guest rootfs kept for the A/B test"
	mkdir -p "$AB_DIR"
	rm -rf "${AB_DIR:?}/"{bundles,work} && mkdir -p "$AB_DIR/bundles" "$AB_DIR/work"
	: >"$AB_DIR/bundle.log"
	: >"$AB_DIR/image-times.txt"
	ab_keys
	ab_root "$r"
	ab_took "keys, rootfs (apt, slim)"
	w=$AB_DIR/work
	# three images of the same system: as flashed (slot A), the good update, and a bad one whose
	# board .link names the EtherCAT port ecat9: rtcat.service finds no [bus].interface and
	# never reaches OP, so its health gate cannot pass
	ab_ext4 "$r" flashed "$w/flashed.ext4"
	ab_ext4 "$r" update-good "$w/good.ext4"
	link=$r/usr/lib/systemd/network/10-rtcat-ethercat.link
	cp "$link" "$w/link.orig"
	sed -i 's/^Name=.*/Name=ecat9/' "$link"
	grep -qx 'Name=ecat9' "$link" || die "$link has no Name= line to break"
	ab_ext4 "$r" update-bad "$w/bad.ext4"
	cp "$w/link.orig" "$link"
	ab_took "three slot images (mkfs.ext4 -d)"
	ab_bundle "$w/b" "$w/good.ext4" "$AB_DIR/bundles/good.raucb" "$AB_COMPATIBLE" dev 1.0.1
	ab_bundle "$w/b" "$w/bad.ext4" "$AB_DIR/bundles/bad.raucb" "$AB_COMPATIBLE" dev 1.0.2-bad
	# the refused ones: a small image is enough, they must be refused before anything is written
	# (incompressible: a squashfs of an empty file system is too small to be a bundle)
	head -c 1M /dev/urandom >"$w/tiny.ext4"
	ab_bundle "$w/b" "$w/tiny.ext4" "$AB_DIR/bundles/untrusted.raucb" "$AB_COMPATIBLE" untrusted 9.9.9-untrusted
	ab_bundle "$w/b" "$w/tiny.ext4" "$AB_DIR/bundles/othercompat.raucb" "rtcat-other-board" dev 9.9.9-othercompat
	# unsigned: the bundle's squashfs without the CMS signature RAUC appends
	mkdir -p "$w/u" && cp "$w/tiny.ext4" "$w/u/rootfs.ext4"
	printf '[update]\ncompatible=%s\nversion=9.9.9-unsigned\n\n[image.rootfs]\nfilename=rootfs.ext4\n' "$AB_COMPATIBLE" >"$w/u/manifest.raucm"
	mksquashfs "$w/u" "$AB_DIR/bundles/unsigned.raucb" -no-progress -quiet -all-root >/dev/null
	ab_took "bundles (rauc bundle)"
	ls -l "$AB_DIR/bundles"
	AB_BUNDLE_BYTES=$(stat -c %s "$AB_DIR/bundles/good.raucb")
	echo "good bundle: $AB_BUNDLE_BYTES bytes (slot image $(stat -c %s "$w/good.ext4") bytes)" | tee "$AB_DIR/sizes.txt"

	# the bundle disk, with the URL of the HTTP server ab_boot starts (a port free now)
	AB_HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	echo "http://10.0.2.2:$AB_HTTP_PORT" >"$AB_DIR/bundles/url"
	rm -f "$AB_DIR/bundles.img"
	mkfs.ext4 -q -L bundles -d "$AB_DIR/bundles" "$AB_DIR/bundles.img" $(($(du -sm "$AB_DIR/bundles" | cut -f1) * 6 / 5 + 64))M

	# the disk: GPT, 1 boot (FAT), 2 slot A (the flashed image), 3 slot B (empty), 4 data
	local disk=$AB_DIR/disk.img args
	rm -f "$disk"
	truncate -s $((1 + AB_BOOT_MB + 2 * AB_SLOT_MB + AB_DATA_MB + 1))M "$disk"
	sfdisk -q "$disk" <<-PT
		label: gpt
		start=1MiB, size=${AB_BOOT_MB}MiB, type=uefi, name=boot
		size=${AB_SLOT_MB}MiB, type=linux, name=rootfs-a
		size=${AB_SLOT_MB}MiB, type=linux, name=rootfs-b
		size=${AB_DATA_MB}MiB, type=linux, name=data
	PT
	s1=1 s2=$((1 + AB_BOOT_MB)) s3=$((s2 + AB_SLOT_MB)) s4=$((s3 + AB_SLOT_MB))
	# boot partition: the boot script and the environment (BOOT_ORDER, attempts)
	args=$(printf '%s' "$G_APPEND" | sed 's| root=/dev/vda | |; s|^root=/dev/vda ||')
	sed "s|@ARGS@|$args|; s|@ROOT_PREFIX@|/dev/vda|; s|@ENV_SIZE@|$AB_ENV_SIZE|g" "$AB_BOOT_CMD" >"$w/boot.cmd"
	! grep -n '@[A-Z_]*@' "$w/boot.cmd" || die "$AB_BOOT_CMD: a placeholder is left"
	mkimage -q -A arm64 -T script -C none -n "rtcat A/B" -d "$w/boot.cmd" "$w/boot.scr" >/dev/null
	printf 'BOOT_ORDER=A B\nBOOT_A_LEFT=3\nBOOT_B_LEFT=3\n' >"$w/env.txt"
	mkenvimage -s "$AB_ENV_SIZE" -o "$w/uboot.env" "$w/env.txt"
	rm -f "$w/boot.vfat" && mkfs.vfat -C -n BOOT "$w/boot.vfat" $((AB_BOOT_MB * 1024)) >/dev/null
	mcopy -i "$w/boot.vfat" "$w/boot.scr" "$w/uboot.env" ::/
	dd if="$w/boot.vfat" of="$disk" bs=1M seek="$s1" conv=notrunc status=none
	dd if="$w/flashed.ext4" of="$disk" bs=1M seek="$s2" conv=notrunc,sparse status=none
	rm -f "$w/data.ext4" && mkfs.ext4 -q -L data "$w/data.ext4" "${AB_DATA_MB}M"
	dd if="$w/data.ext4" of="$disk" bs=1M seek="$s4" conv=notrunc,sparse status=none
	rm -f "$w"/*.ext4 "$w/boot.vfat"
	rm -rf "$r"
	ab_took "bundle disk, A/B disk"
	sfdisk -l "$disk" | tail -5
}

ab_boot() {
	AB_DIR="$out/ab"
	local log="$AB_DIR/console.log" rc=0 qpid qclock=() t0 port now
	[ "$icount" = off ] || qclock=(-icount "shift=$icount,sleep=on,align=off")
	# the HTTP server (byte ranges) for the streamed install, on the port the bundle disk names
	port=$(sed -n 's|^http://10.0.2.2:\([0-9]*\)$|\1|p' "$AB_DIR/bundles/url")
	rm -f "$AB_DIR/http.port"
	python3 "$sys/ab/http-range.py" --dir "$AB_DIR/bundles" --port "$port" --port-file "$AB_DIR/http.port" 2>"$AB_DIR/http.log" &
	AB_HTTP_PID=$!
	for _ in $(seq 50); do [ -s "$AB_DIR/http.port" ] && break; sleep 0.1; done
	[ -s "$AB_DIR/http.port" ] || die "the bundle HTTP server did not start on port $port ($AB_DIR/http.log)"
	: >"$log"
	t0=${EPOCHREALTIME/./}
	# No -no-reboot: the guest reboots through U-Boot between the steps and powers off at the end.
	timeout "$AB_TIMEOUT" qemu-system-aarch64 -M virt -cpu cortex-a76 -smp "$GUEST_NR_CPUS" -m 1536 \
		-display none -monitor none -serial "file:$log" -bios "$AB_UBOOT" \
		-drive "if=none,file=$AB_DIR/disk.img,format=raw,id=hd0" -device virtio-blk-pci,drive=hd0,num-queues=1 \
		-drive "if=none,file=$AB_DIR/bundles.img,format=raw,id=hd1,readonly=on" -device virtio-blk-pci,drive=hd1,num-queues=1 \
		-netdev user,id=net0 -device virtio-net-pci,netdev=net0,romfile= -device virtio-rng-pci "${qclock[@]}" &
	qpid=$!
	# the console, with the host's time of each line (the figures: install to OP, rollback)
	tail -f -n +1 --pid="$qpid" "$log" | while IFS= read -r l; do
		now=$((${EPOCHREALTIME/./} - t0))
		printf '%d.%d %s\n' $((now / 1000000)) $((now / 100000 % 10)) "$l"
	done | tee "$AB_DIR/console-timed.log" | grep --line-buffered -E 'RTCAT-AB|rtcat-ab:|verdict:|reboot: |Kernel panic' || true
	wait "$qpid" || rc=$?
	echo "qemu exit status $rc"
	[ "$rc" -ne 124 ] || echo "the A/B guest did not power off within ${AB_TIMEOUT}s (console: $log)" >&2
	AB_QEMU_RC=$rc
	kill "$AB_HTTP_PID" 2>/dev/null || true
	wait "$AB_HTTP_PID" 2>/dev/null || true
	AB_HTTP_PID=""
}

# the data partition, read back from the powered-off disk: the results directory and the gate's log
ab_readback() {
	AB_DIR="$out/ab"
	local g="$AB_DIR/guest" f
	rm -rf "$g" && mkdir -p "$g"
	dd if="$AB_DIR/disk.img" of="$AB_DIR/data.img" bs=1M skip=$((1 + AB_BOOT_MB + 2 * AB_SLOT_MB)) count="$AB_DATA_MB" status=none
	for f in /persist/var/lib/rtcat/ab-systest-marker /persist/var/lib/rtcat/summary.json /persist/var/lib/rtcat/events.log \
		/persist/var/lib/rtcat-health-gate/verdicts.log /ab-systest/report.txt; do
		debugfs -R "dump -p $f $g/$(basename "$f")" "$AB_DIR/data.img" 2>/dev/null || true
		[ -s "$g/$(basename "$f")" ] || rm -f "$g/$(basename "$f")"
	done
	rm -f "$AB_DIR/data.img"
	ls -l "$g"
}

ab_check() {
	AB_DIR="$out/ab"
	AB_BUNDLE_BYTES=$(stat -c %s "$AB_DIR/bundles/good.raucb")
	python3 "$sys/ab-assert.py" check --dir "$AB_DIR" --qemu-rc "$AB_QEMU_RC" --bundle-bytes "$AB_BUNDLE_BYTES" || status=1
}
ab_negative_controls() {
	AB_DIR="$out/ab"
	AB_BUNDLE_BYTES=$(stat -c %s "$AB_DIR/bundles/good.raucb")
	python3 "$sys/ab-assert.py" self-test --dir "$AB_DIR" --qemu-rc "$AB_QEMU_RC" --bundle-bytes "$AB_BUNDLE_BYTES" || status=1
}
