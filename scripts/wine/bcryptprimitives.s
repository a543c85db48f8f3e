# bcryptprimitives.s: a stand-in bcryptprimitives.dll for Wine 8.0, which
# has no such DLL. Go >= 1.24 programs built for Windows need its one
# export, ProcessPrng, at start-up (runtime.loadOptionalSyscalls), and die
# with "bcryptprimitives.dll not found" without it; crypto/rand uses it
# too. Only for running test binaries under Wine: real Windows has its own.
# Built by build-bcryptprimitives.sh (GNU as, AT&T syntax, Win64 ABI).

	.text

# BOOL WINAPI ProcessPrng(PBYTE pbData, SIZE_T cbData)
#   rcx = pbData, rdx = cbData.
# Fills the buffer from advapi32!SystemFunction036 (RtlGenRandom), whose
# length is a ULONG, so a length over 4 GiB - 1 is done in chunks. Returns
# TRUE when every chunk was filled. The real ProcessPrng never fails; this
# one returns FALSE if RtlGenRandom does, so that Go stops (the runtime and
# crypto/rand check the result) instead of using an unfilled buffer.
	.globl	ProcessPrng
	.def	ProcessPrng; .scl 2; .type 32; .endef
ProcessPrng:
	# rsi = next byte, rdi = bytes left, rbx = this chunk: callee-saved,
	# so they survive the call. Entry rsp is 8 mod 16; three pushes make
	# it 0, and 32 bytes of shadow space for the callee keep it so.
	pushq	%rsi
	pushq	%rdi
	pushq	%rbx
	subq	$32, %rsp
	movq	%rcx, %rsi
	movq	%rdx, %rdi
1:
	testq	%rdi, %rdi
	jz	2f
	movl	$0xFFFFFFFF, %ebx	# the largest ULONG (zero-extended)
	cmpq	%rbx, %rdi
	cmovbq	%rdi, %rbx		# chunk = min(left, 0xFFFFFFFF)
	movq	%rsi, %rcx
	movl	%ebx, %edx
	call	*__imp_SystemFunction036(%rip)
	testb	%al, %al		# BOOLEAN: only the low byte counts
	jz	3f
	addq	%rbx, %rsi
	subq	%rbx, %rdi
	jmp	1b
2:
	movl	$1, %eax		# TRUE
	jmp	4f
3:
	xorl	%eax, %eax		# FALSE
4:
	addq	$32, %rsp
	popq	%rbx
	popq	%rdi
	popq	%rsi
	ret

# BOOL WINAPI DllMain(HINSTANCE, DWORD, LPVOID): nothing to set up or tear
# down. It must exist: without an entry point ld would make the first
# instruction of .text, ProcessPrng, the DLL's entry.
	.globl	DllMain
	.def	DllMain; .scl 2; .type 32; .endef
DllMain:
	movl	$1, %eax
	ret
